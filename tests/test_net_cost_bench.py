"""benchmarks/net_cost.py: the regime table with the safety net against the table before it."""

from __future__ import annotations

import pytest

from bench_scripts import load_script

nc = load_script("net_cost")


def row(hits: dict[str, float], fell: tuple[str, ...] = ()) -> dict:
    return {"results": {p: {"hit_rate": h, "safety_net": {"fallbacks": 1, "fallback_share": 0.2} if p in fell else None}
                        for p, h in hits.items()}}


def test_drops_gains_and_changes_without_a_fallback_are_told_apart():
    base = {p: 0.5 for p in nc.AGENTRT}
    k1, k2 = ("coding", 1.0, 8, 0.5), ("gaia", 4.0, 32, 1.0)
    before = {k1: row(base), k2: row(base)}
    after = {k1: row(base | {"pbkv-he": 0.49}, fell=("pbkv-he",)), k2: row(base | {"pbkv-ta": 0.502})}
    doc = nc.compare(before, after)
    he, ta = doc["policies"]["pbkv-he"], doc["policies"]["pbkv-ta"]
    assert he["largest_drop"] == (pytest.approx(-1.0), list(k1)) and len(he["fell_back"]) == 1
    assert ta["fell_back"] == [] and ta["changed_without_a_fallback"] == [{"regime": list(k2), "points": pytest.approx(0.2)}]
    text = nc.render(doc, "regimes")
    assert "pbkv-he    fell back in  1; largest drop -1.00 (coding 1.0 8 0.5)" in text
    assert "1 rows changed without a fallback" in text and text.startswith("regimes: 2 rows")


def test_tables_over_different_regimes_are_refused():
    with pytest.raises(SystemExit, match="differ in their rows"):
        nc.compare({("a", 1.0, 8, 0.5): row({p: 0.5 for p in nc.AGENTRT})}, {})

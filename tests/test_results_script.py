"""benchmarks/results.py: the summary row of one run, with the best policy against LRU and against
the held bound (no bench runs: a JSON written here)."""

from __future__ import annotations

import json

from bench_scripts import load_script


def _row(hit, ttft=1.0, e2e=10.0, **flags):
    return {"hit_rate": hit, "ttft_mean_s": ttft, "e2e_mean_s": e2e, **flags}


def test_summary_compares_the_best_policy_with_lru_and_with_the_held_bound(monkeypatch, tmp_path):
    mod = load_script("results")
    (tmp_path / "results").mkdir()
    results = {"lru": _row(0.2, 2.0, 20.0), "pbkv-ta": _row(0.3, 1.0, 10.0), "cachesage": _row(0.25),
               "oracle": _row(0.35, bound=True), "belady-held": _row(0.4, None, None, bound=True, offline=True),
               "belady": _row(0.6, None, None, bound=True, offline=True)}
    (tmp_path / "results" / "gaia-gpu6430.json").write_text(json.dumps({"results": results}))
    monkeypatch.setattr(mod, "DOCS", tmp_path)
    monkeypatch.setattr(mod, "WORKLOADS", ["gaia"])
    row = mod.summary().strip().splitlines()[-1]
    # the oracle and the bounds are never "best"; a bound absent from a run is "-"
    assert row == ("| gaia | 6,430 | 20.0 | 25.0 | - | - | - | - | 30.0 | 35.0 | 40.0 | 60.0 | - "
                   "| pbkv-ta 1.50x | 0.75 | 2.00x | 2.00x |")


def test_of_bound_without_the_bound_is_a_dash():
    mod = load_script("results")
    assert mod.of_bound(_row(0.3), None) == "-"
    assert mod.of_bound(_row(0.3), _row(0.0)) == "-"
    assert mod.of_bound(_row(0.3), _row(0.6)) == "0.50"

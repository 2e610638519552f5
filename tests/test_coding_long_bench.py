"""benchmarks/coding_long.py: the spread of memory sizes around each point, the paired medians
against LRU, the net-off runs only where the net fell back, and the tables over them."""

from __future__ import annotations

import pytest

from bench_scripts import load_script

cl = load_script("coding_long")


def result(hit: float, ttft: float = 1.0, fallbacks: int = 0) -> dict:
    net = {"fallbacks": fallbacks, "fallback_share": 0.01 * fallbacks} if fallbacks else None
    return {"hit_rate": hit, "ttft_mean_s": ttft, "ttft_p90_s": ttft, "e2e_mean_s": ttft, "safety_net": net}


def run(blocks: int, lru: float, he: float, he_off: float | None = None) -> dict:
    on = {p: result(lru + 0.01) for p in cl.AGENTRT}
    on["lru"], on["oracle"] = result(lru), result(lru + 0.03, 0.5)
    on["pbkv-he"] = result(he, 1.2, fallbacks=int(he_off is not None))
    off = {p: on[p] for p in cl.AGENTRT}
    if he_off is not None:
        off["pbkv-he"] = result(he_off, 1.1)
    return {"gpu_blocks": blocks, "on": on, "off": off}


def test_sizes_are_one_percent_apart_around_the_point():
    assert cl.sizes(10_000, 5) == [9_800, 9_900, 10_000, 10_100, 10_200]
    assert cl.sizes(10_000, 1) == [10_000]
    assert cl.sizes(100, 3) == [99, 100, 101] and min(cl.sizes(64, 5)) == 64


def test_policies_are_compared_with_lru_at_the_same_size_and_summarised_by_the_median():
    row = {"label": "coding-b64", "f": 1.0, "gpu_blocks": 100, "block_size": 64,
           "runs": [run(98, 0.50, 0.49), run(99, 0.60, 0.61, he_off=0.62), run(100, 0.55, 0.53)]}
    assert cl.diffs(row, "pbkv-he") == pytest.approx([-1.0, 1.0, -2.0])
    assert cl.diffs(row, "pbkv-he", "off") == pytest.approx([-1.0, 2.0, -2.0])
    assert cl.fallbacks(row, "pbkv-he") == 1 and cl.fallbacks(row, "pbkv-ta") == 0
    text = cl.tables({"rows": [row]})
    assert "-1.0 (-2.0..+1.0) [net off: -1.0; fell back in 1 of 3]" in text
    assert ("shortfall against LRU of agentrt's own policies (cachesage and the PBKV family) is 1.0 points "
            "of hit rate (pbkv-he on coding-b64 f 1.00) and 20.0% of mean TTFT (pbkv-he") in text
    assert "of the baselines (kvflow, ttl), 0.0 points of hit rate (none)" in text and "at 3 memory sizes" in text
    assert "+1.0 (+1.0..+1.0)" in text      # every other policy: one point above LRU at each size
    assert "coding-b64 f1.00" in cl.line(row)


def test_the_net_off_run_is_made_only_for_policies_whose_net_fell_back(monkeypatch, tmp_path):
    calls = []

    def fake_bench(path, blocks, policies, net, tmp):
        calls.append((blocks, tuple(policies), net))
        rs = {p: result(0.5, fallbacks=int(p == "ttl" and net)) for p in policies}
        return rs

    monkeypatch.setattr(cl, "bench", fake_bench)
    r = cl.one_size(tmp_path / "t.jsonl", 500, tmp_path)
    assert calls == [(500, ("lru", *cl.AGENTRT, "oracle"), True), (500, ("ttl",), False)]
    assert r["off"]["ttl"]["safety_net"] is None and r["off"]["pbkv-ta"] is r["on"]["pbkv-ta"]

"""benchmarks/generalise.py: a random application runs through the regime sweep's path, and the
table counts what it says it counts."""

from __future__ import annotations

import pytest

from bench_scripts import load_script


def row(mod, seed: int, f: float, hits: dict[str, float]) -> dict:
    res = {p: {"hit_rate": hits.get(p, hits["lru"])} for p in mod.POLICIES}
    return {"workload": "random", "seed": seed, "tool_scale": 1.0, "concurrency": 8, "capacity_factor": f,
            "gpu_blocks": 1000, "results": res}


def test_table_and_summary_count_what_they_say():
    mod = load_script("generalise")
    rows = [row(mod, 1, 0.5, {"lru": 0.20, "pbkv-ta": 0.29, "kvflow": 0.19, "oracle": 0.30,    # in scope, 0.97
                              "belady-held": 0.32}),
            row(mod, 1, 1.0, {"lru": 0.50, "pbkv-ta": 0.52, "oracle": 0.55, "belady-held": 0.55}),  # out of scope
            row(mod, 2, 0.5, {"lru": 0.10, "pbkv-ta": 0.12, "cachesage": 0.13, "oracle": 0.15,   # in, best 0.87
                              "belady-held": 0.16})]
    text = mod.table(rows)
    lines = text.splitlines()
    assert lines[2].startswith("| 1 | ") and lines[2].endswith("| 0.97 | 0.97 | 1.50 | +9.0 |")
    assert "| kvflow | +0.0 | -1.0 | +0.0 | 1 |" in text      # 20 -> 19: one point below LRU, once
    assert "(2 runs), the best agentrt policy reaches 0.95x the oracle in 1 and pbkv-ta alone in 1." in text
    assert ("Against `belady-held` (3 runs; the bound of the LRU replay's stream), the oracle is 0.0 to 2.0 "
            "points below it (median 1.0;") in text
    assert "pbkv-ta reaches 0.75-0.95 of it (median 0.91)." in text


@pytest.mark.slow
def test_a_random_application_runs_through_the_regime_path(tmp_path):
    mod = load_script("generalise")
    r = mod.run("random", 1.0, 4, 0.5, 12, tmp_path, seed=3)
    assert r["seed"] == 3 and "--seed 3" in r["generate"]
    assert set(r["results"]) == set(mod.POLICIES)
    assert r["results"]["oracle"]["hit_rate"] >= r["results"]["lru"]["hit_rate"] - 0.005

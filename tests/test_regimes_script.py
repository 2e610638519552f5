"""benchmarks/regimes.py: a table row states the oracle's distance below `belady-held`, and rows
from runs without that bound still render (no bench runs: rows written here)."""

from __future__ import annotations

from bench_scripts import load_script

AGENTS = {"cachesage": 0.30, "kvflow": 0.28, "pbkv-lae": 0.29, "pbkv-he": 0.31, "pbkv-ta": 0.33}


def _row(workload: str, held: float | None) -> dict:
    results = {p: {"hit_rate": h} for p, h in {"lru": 0.25, **AGENTS, "oracle": 0.35, "belady": 0.5}.items()}
    if held is not None:
        results["belady-held"] = {"hit_rate": held}
    return {"workload": workload, "tool_scale": 1.0, "concurrency": 8, "capacity_factor": 0.5,
            "gpu_blocks": 1000, "results": results}


def test_table_gives_the_oracle_below_the_held_bound():
    mod = load_script("regimes")
    text = mod.table([_row("gaia", 0.38), _row("mix", 0.36), _row("old", None), _row("coding", 0.345)])
    lines = text.splitlines()
    assert lines[2] == ("| gaia | 1 | 8 | 0.5 | 1,000 | 25.0 | pbkv-ta | 33.0 | 33.0 | 35.0 | 38.0 | 50.0 | 3.0 "
                        "| 0.94 | 1.40 | +8.0 |")
    assert lines[4].split(" | ")[10:13] == ["-", "50.0", "-"]        # no bound in that run
    assert ("Against `belady-held` (3 regimes; the bound of the LRU replay's stream), the oracle is at "
            "most 3.0 points below it (median 1.0) and above it in 1 (by up to 0.5 points: its own run "
            "orders the calls differently); the best agentrt policy reaches 0.87-0.96 of it.") in text


def test_the_sweep_runs_the_held_bound():
    mod = load_script("regimes")
    assert {"oracle", "belady-held", "belady"} <= set(mod.POLICIES)


def test_a_rerun_replaces_only_the_policies_it_ran():
    mod = load_script("results")
    old = [dict(_row("gaia", 0.38), command="agentrt bench ...", seconds=9.0),
           dict(_row("gaia", 0.38), capacity_factor=1.0)]
    new = {"tool_scale": 1.0, "concurrency": 8, "capacity_factor": 0.5, "seconds": 2.0,
           "results": {"pbkv-he": {"hit_rate": 0.29, "safety_net": {"fallbacks": 1}}}}
    got = mod.merge_rerun(old, new, ("tool_scale", "concurrency", "capacity_factor"), ["pbkv-he"])
    assert got["results"]["pbkv-he"] == {"hit_rate": 0.29, "safety_net": {"fallbacks": 1}}
    assert got["results"]["lru"] == {"hit_rate": 0.25} and got["results"]["belady-held"] == {"hit_rate": 0.38}
    assert got["rerun"] == ["pbkv-he"] and got["command"] == "agentrt bench ..." and got["seconds"] == 2.0
    assert old[0]["results"]["pbkv-he"] == {"hit_rate": 0.31}          # the old rows are not changed

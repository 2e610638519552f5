"""benchmarks/headroom.py: the per-workload pick and the scan table say what they claim."""

from __future__ import annotations

import pytest

from bench_scripts import load_script


def row(w: str, t: float, f: float, lru: float, ta: float, orc: float) -> dict:
    return {"workload": w, "tool_scale": t, "capacity_factor": f, "gpu_blocks": int(1000 * f),
            "results": {"lru": {"hit_rate": lru}, "pbkv-ta": {"hit_rate": ta}, "oracle": {"hit_rate": orc}}}


def test_picks_the_largest_gain_and_counts_workloads_at_2x():
    mod = load_script("headroom")
    rows = [row("a", 1.0, 0.5, 0.20, 0.30, 0.35),     # 1.5x
            row("a", 4.0, 0.25, 0.10, 0.21, 0.30),    # 2.1x: picked; oracle 3.0x, also the largest
            row("b", 1.0, 1.0, 0.50, 0.55, 0.70),     # 1.1x; oracle 1.4x
            row("b", 4.0, 1.5, 0.60, 0.63, 0.66)]
    text = mod.table(rows)
    lines = text.splitlines()
    assert lines[2] == "| a | 4 | 0.25 | 250 | 10.0 | 21.0 | 30.0 | 2.10 | 3.00 | 0.70 | 3.00 (4, 0.25) |"
    assert lines[3].startswith("| b | 1 | 1 | 1,000 | 50.0 | 55.0 | 70.0 | 1.10 | 1.40 |")
    assert "2x LRU at some point of the scan: 1 of 2." in text
    scan = text.split("Every point of the scan")[1]
    assert "| a | - | 20 / 30 / 35 |" in scan        # x1 f0.25 not run: a dash, not a number


@pytest.mark.slow
def test_one_point_runs_with_three_policies(tmp_path):
    mod = load_script("headroom")
    r = mod.run("hover", 1.0, 4, 0.5, 8, tmp_path, policies=mod.POLICIES)
    assert set(r["results"]) == set(mod.POLICIES)
    assert "--policies lru,pbkv-ta,oracle" in r["command"]

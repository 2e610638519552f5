"""benchmarks/schedulers.py's goodput refinement (sched_goodput.py): bisection between the grid's last passing rate
and the next, and past the grid's top when a pair still meets the SLO there, on a synthetic p90
TTFT curve (no simulator runs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench_scripts import load_script


def fake_runs(mod, monkeypatch, knee: dict[str, float]):
    """Each pair (scheduler + eviction) meets a 2 s p90 TTFT SLO up to its `knee` rate."""
    probed: list[tuple[str, float]] = []

    def generate(workload, rate, workflows, tmp):
        return Path(f"{rate!r}"), f"generate {rate}"

    def bench(path, policies, scheduler, tmp, extra=()):
        rate = float(str(path))
        pair = f"{scheduler}+{policies[0]}"
        probed.append((pair, rate))
        p90 = 1.0 if rate <= knee[pair] else 9.0
        return {"results": {policies[0]: {"ttft_p90_s": p90}}}, f"bench {pair} {rate}"

    monkeypatch.setattr(mod, "generate", generate)
    monkeypatch.setattr(mod, "bench", bench)
    return probed


@pytest.mark.parametrize("knee_x, expect_past_top", [(1.1, False), (1.4, True)])
def test_refine_bisects_and_goes_past_the_grid_top(monkeypatch, knee_x, expect_past_top):
    mod = load_script("sched_goodput")
    grid = [0.5, 0.8, 1.0, 1.2]
    knee = {"fcfs+lru": 0.9, "agent+pbkv-ta": knee_x}
    d = {"workflows": 10, "goodput_grid": [{"rate": r} for r in grid],
         "goodput": {k: max(r for r in grid if r <= v) for k, v in knee.items()}}
    probed = fake_runs(mod, monkeypatch, knee)
    out = mod.refine_goodput("mix", d, 2.0, Path("."), lambda m: None, steps=6)
    # FCFS + LRU: between 0.8 (passes) and 1.0 (fails), converging on its knee from below
    assert 0.9 - 0.2 / 2 ** 6 <= out["fcfs+lru"]["rate"] <= 0.9
    best = out["agent+pbkv-ta"]["rate"]
    assert best <= knee_x and best > knee_x * 0.97
    past = [r for p, r in probed if p == "agent+pbkv-ta" and r > grid[-1]]
    assert bool(past) == expect_past_top


@pytest.mark.parametrize("fcfs_knee, agent_knee", [(0.7, 1.4), (0.9, 1.1)])
def test_oracle_goodput_scans_down_or_up_then_bisects(monkeypatch, fcfs_knee, agent_knee):
    mod = load_script("sched_goodput")
    grid = [0.5, 0.8, 1.0, 1.2]
    knee = {"fcfs+oracle": fcfs_knee, "agent+oracle": agent_knee}
    d = {"workflows": 10, "goodput_grid": [{"rate": r} for r in grid], "goodput": {"fcfs+lru": 0.8}}
    probed = fake_runs(mod, monkeypatch, knee)
    out = mod.oracle_goodput("mix", d, 2.0, Path("."), lambda m: None, steps=6)
    for pair, k in knee.items():
        got = out[pair]["rate"]
        assert k * 0.97 < got <= k, (pair, got)
        mine = [r for p, r in probed if p == pair]
        assert mine[0] == 0.8                              # the scan starts at FCFS + LRU's goodput
        assert [r for r, _ in out[pair]["probes"]] == mine
        assert out[pair]["command"] == f"bench {pair} {mine[-1]}"

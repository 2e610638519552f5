"""benchmarks/tenant_dilution.py: the invented tenants' trace, the table, and the effect it
measures, end to end through `agentrt bench --scheduler fair` on a small two-tenant trace: idle
tenants that hold a few blocks must not hold the real tenants' calls (they did under a static
split of running memory: A's longest wait went from 1-19 s to 55-78 s)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentrt.trace.reader import read_trace
from bench_scripts import load_script


def small_trace(mod, tmp: Path, sybils: int) -> Path:
    base = mod.sched_bench.two_tenant_trace("swebench", 0.0116, 6, 5.0, tmp, True, 1)
    return mod.with_sybils(base, sybils, tmp) if sybils else base


def test_sybil_trace_keeps_every_call_and_holds_the_workflows_open(tmp_path):
    mod = load_script("tenant_dilution")
    base = small_trace(mod, tmp_path, 0)
    path = mod.with_sybils(base, 5, tmp_path)
    _, base_calls = read_trace(base)
    _, calls = read_trace(path)
    base_calls, calls = list(base_calls), list(calls)
    sybil = [c for c in calls if c.tenant.startswith("s")]
    assert len(calls) == len(base_calls) + 10 and len({c.tenant for c in sybil}) == 5
    last = max(c.timestamp or 0.0 for c in base_calls)
    assert all(c.think_ms > last for c in sybil if c.call == 1)           # open past every arrival
    firsts = [c.timestamp for c in calls if c.call == 0]
    assert firsts == sorted(firsts)                                       # workflows in arrival order
    assert {c.input_length for c in sybil} == {64, 80}


def test_render_names_every_label_and_the_commands():
    mod = load_script("tenant_dilution")
    stats = {"hit_rate": 0.5, "ttft_p90_s": 1.0, "wait_max_s": 2.0}
    seeds = {str(s): {"command": f"agentrt bench s{s}", "a": stats, "b": stats} for s in mod.SEEDS}
    doc = {"old": {"rate_a": 0.01, "rows": {"A and B": seeds}}, "new": {"rate_a": 0.01, "rows": {"A and B": seeds}}}
    md = mod.render(doc)
    assert "| old | A and B | 50.0 (50.0-50.0) |" in md and "| new | A and B |" in md
    assert "`agentrt bench s1`" in md


@pytest.mark.slow
def test_idle_tenants_do_not_hold_the_real_tenants_calls(tmp_path):
    mod = load_script("tenant_dilution")
    waits = {}
    train = small_trace(mod, tmp_path, 0)            # every workflow scored in both runs
    for n in (0, 20):
        doc, _ = mod.sched_bench.bench(small_trace(mod, tmp_path, n), ["lru"], "fair", tmp_path,
                                       ["--train", str(train)])
        waits[n] = {t: mod.sched_bench.tenant_stats(doc, "lru", t)["wait_max_s"] for t in ("a", "b")}
    for t in ("a", "b"):
        assert waits[20][t] <= waits[0][t] + 1.0, f"tenant {t} held for the idle tenants' shares: {waits}"

"""Blocks shared when scheduled (`EngineConfig.cache_at="schedule"`, vLLM V1's behaviour) against
shared after the prefill (the default, SGLang's): calls admitted together share a prefix that
neither has computed, chunk by chunk, and the agent scheduler's prefix hold turns itself off."""

from __future__ import annotations

import json

import pytest

from agentrt.engine.simulator import EngineConfig
from agentrt.sched.agent import AgentScheduler
from sched_fakes import BS
from test_sched_admission import PRESET, call, finish, sim_of
from test_sched_prefix_hold import fan_out


def test_the_setting_is_checked():
    with pytest.raises(ValueError, match="cache_at must be one of prefill, schedule, got 'never'"):
        EngineConfig(preset=PRESET, block_size=BS, gpu_blocks=10, cache_at="never")


def test_a_fan_out_admitted_together_shares_its_prompt_when_blocks_are_cached_at_schedule():
    calls = fan_out()
    after = finish(sim_of(calls, 2000), len(calls))
    at_schedule = finish(sim_of(calls, 2000, cache_at="schedule"), len(calls))
    held = finish(sim_of(calls, 2000, scheduler=AgentScheduler()), len(calls))
    # the three instances are scheduled in one iteration: the second and third find the first's
    # 40 new blocks, scheduled just before them, and compute only their last token, as with the
    # hold, but without waiting for the first's prefill
    assert at_schedule.gpu_hit_tokens - after.gpu_hit_tokens == 2 * (40 * BS - 1)
    assert at_schedule.gpu_hit_tokens == held.gpu_hit_tokens
    assert at_schedule.prefill_tokens == held.prefill_tokens
    assert at_schedule.gpu_hit_tokens + at_schedule.prefill_tokens == at_schedule.prompt_tokens
    assert max(at_schedule.ttft) <= max(held.ttft)


def test_a_long_prompt_is_shared_chunk_by_chunk():
    # two identical 12-block prompts arrive together; the budget is 4 blocks per iteration, so the
    # first computes them over three iterations and the second gets no tokens until the last one:
    # by then all 12 are cached and it computes only its final token
    ids = list(range(1, 13))
    calls = [call("a", 0, ids, ts=0), call("b", 0, ids, ts=0)]
    kw = dict(max_batch_tokens=4 * BS)
    after = finish(sim_of(calls, 100, **kw), 2)
    at_schedule = finish(sim_of(calls, 100, cache_at="schedule", **kw), 2)
    assert after.gpu_hit_tokens == 0 and after.prefill_tokens == 24 * BS
    assert at_schedule.gpu_hit_tokens == 12 * BS - 1 and at_schedule.prefill_tokens == 12 * BS + 1


def test_a_call_arriving_mid_prefill_looks_the_cache_up_when_it_is_first_scheduled():
    # b arrives after a's first two chunks (8 of its 12 blocks) were scheduled; a, admitted first,
    # takes each iteration's budget until its last chunk, and b's first chunk comes beside that
    # one: b matches all 12 then (as vLLM, which looks a request up when it schedules it). Sharing
    # after the prefill, b matched at its admission and finds none of them
    ids = list(range(1, 13))
    kw = dict(max_batch_tokens=4 * BS)
    probe = sim_of([call("a", 0, ids, ts=0)], 100, cache_at="schedule", **kw)
    while probe.cache.match("default", ids, 12)[0] < 8:
        probe.step()
    t = probe.now
    calls = [call("a", 0, ids, ts=0), call("b", 0, ids + [99], ts=t * 1000 - 1e-3)]   # ms, just before
    assert finish(sim_of(calls, 100, cache_at="schedule", **kw), 2).gpu_hit_tokens == 12 * BS
    assert finish(sim_of(calls, 100, **kw), 2).gpu_hit_tokens == 0


def test_the_agent_schedulers_prefix_hold_is_off_where_blocks_are_shared_when_scheduled():
    calls = fan_out()
    sched = AgentScheduler()
    m = finish(sim_of(calls, 2000, scheduler=sched, cache_at="schedule"), len(calls))
    assert sched.prefix_hold is False
    plain = finish(sim_of(calls, 2000, cache_at="schedule"), len(calls))
    assert m.gpu_hit_tokens == plain.gpu_hit_tokens


def test_bench_records_the_setting(tmp_path, capsys):
    from agentrt.cli import app
    from typer.testing import CliRunner
    out = tmp_path / "r.json"
    res = CliRunner().invoke(app, ["bench", "--workload", "team", "--workflows", "12", "--policies", "lru",
                                   "--cache-at", "schedule", "--json", str(out), "--quiet"])
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert doc["config"]["cache_at"] == "schedule"
    assert "blocks shared when scheduled (vLLM)" in res.output

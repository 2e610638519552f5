"""Engine simulator: cost model shape, closed-loop replay, batching, tiers and metrics."""

import pytest

from agentrt.engine.costs import CostModel
from agentrt.engine.presets import PRESETS, get_preset
from agentrt.engine.replay import WorkflowReplay
from agentrt.engine.simulator import EngineConfig, Simulator
from agentrt.errors import AgentrtError
from agentrt.policies.lru import LRUPolicy
from agentrt.trace.schema import Call

PRESET = get_preset("llama3.1-8b-h100")


def call(wf, i, ids, n_in=None, n_out=4, ts=None, after=None, think=0.0, last=None, agent=None, out_ids=()):
    return Call(workflow=wf, call=i, input_length=n_in or 16 * len(ids), output_length=n_out,
                hash_ids=list(ids), agent=agent, timestamp=ts, think_ms=think,
                after=tuple(after) if after is not None else ((i - 1,) if i else ()),
                last=last, output_hash_ids=list(out_ids))


def simulate(calls, gpu_blocks=1000, host_blocks=0, bs=16, concurrency=None, **kw):
    cfg = EngineConfig(preset=PRESET, block_size=bs, gpu_blocks=gpu_blocks, host_blocks=host_blocks, **kw)
    sim = Simulator(cfg, LRUPolicy(), iter(calls), concurrency=concurrency)
    return sim, sim.run()


# ---------------------------------------------------------------- cost model
def test_cost_model_shapes():
    c = CostModel(PRESET)
    assert c.prefill(4096, 0) > c.prefill(2048, 0) > c.prefill(512, 0) > 0
    assert c.prefill(512, 8192) > c.prefill(512, 0)          # attention over cached context
    assert c.prefill(512, 8192) < c.prefill(8704, 0) / 5     # a cached prefix saves most of it
    assert c.decode(64, 64 * 4096) > c.decode(8, 8 * 4096)
    assert c.decode(1, 100) >= PRESET.iteration_overhead_s
    assert c.pcie_seconds(51.2e9) == pytest.approx(1.0)


def test_presets_capacity_from_memory():
    for p in PRESETS.values():
        assert p.kv_capacity_tokens() > 0
    h100 = get_preset("qwen3-32b-h100").kv_capacity_tokens()
    h200 = get_preset("qwen3-32b-h200").kv_capacity_tokens()
    assert h200 > 5 * h100          # 141 GB vs 80 GB around 65.6 GB of weights
    assert PRESETS["llama3.1-8b-h100"].model.kv_bytes_per_token == 131072


def test_unknown_preset_lists_names():
    with pytest.raises(AgentrtError, match="valid presets: .*qwen3-14b-h200"):
        get_preset("gpt-9")


# ---------------------------------------------------------------- replay
def test_closed_loop_waits_for_predecessor_and_think_time():
    calls = [call("w", 0, [1], ts=0), call("w", 1, [2], think=5000), call("w", 2, [3], ts=20000, last=True)]
    r = WorkflowReplay(iter(calls))
    assert r.next_arrival() == 0.0
    (t0, c0), = r.pop_arrivals(0.0)
    assert c0.call == 0
    assert r.pop_arrivals(100.0) == []                  # call 1 waits for call 0
    r.finish(c0, 1.0)
    assert r.next_arrival() == pytest.approx(6.0)       # finish + 5 s think
    (t1, c1), = r.pop_arrivals(6.0)
    r.finish(c1, 7.0)
    assert r.next_arrival() == pytest.approx(20.0)      # its timestamp is a release time
    (_, c2), = r.pop_arrivals(20.0)
    _, ended = r.finish(c2, 21.0)
    assert ended is not None and r.done


def test_fan_out_and_fan_in():
    calls = [call("w", 0, [1], ts=0), call("w", 1, [2], after=[0]), call("w", 2, [3], after=[0]),
             call("w", 3, [4], after=[1, 2], last=True)]
    r = WorkflowReplay(iter(calls))
    (_, c0), = r.pop_arrivals(0.0)
    r.finish(c0, 1.0)
    got = r.pop_arrivals(1.0)
    assert sorted(c.call for _, c in got) == [1, 2]
    r.finish(got[0][1], 2.0)
    assert r.pop_arrivals(10.0) == []
    r.finish(got[1][1], 3.0)
    (t3, c3), = r.pop_arrivals(10.0)
    assert c3.call == 3 and t3 == 3.0


def test_delayed_arrivals_add_a_path_per_call_in_flight():
    from agentrt.engine.replay import DelayedArrivals
    calls = [call(f"w{i}", 0, [i + 1], ts=0, last=True) for i in range(3)] + [call("w9", 0, [9], ts=5000, last=True)]
    r = DelayedArrivals(WorkflowReplay(iter(calls)), 0.5, per_stream=1.0)
    assert r.next_arrival() == 0.5                      # the idle path: a lower bound, when to look
    (t, c), = r.pop_arrivals(0.5)                       # read: 0 in flight, 1 and 2 wait 1 s and 2 s more
    assert (t, c.workflow) == (0.0, "w0") and r.in_flight == 3
    assert r.next_arrival() == 1.5 and r.pop_arrivals(1.4) == []
    (_, c1), = r.pop_arrivals(1.5)
    r.finish(c, 1.6)
    r.finish(c1, 1.7)
    (_, c2), = r.pop_arrivals(2.5)
    assert c2.workflow == "w2" and r.in_flight == 1
    assert r.next_arrival() == 5.5
    (t, c9), = r.pop_arrivals(6.5)                      # issued at 5 with one in flight: 5 + 0.5 + 1
    assert t == 5.0 and c9.workflow == "w9"
    plain = DelayedArrivals(WorkflowReplay(iter(calls[:2])), 0.5)
    assert len(plain.pop_arrivals(0.5)) == 2           # no per-stream term: every call after the idle path


def test_concurrency_limits_active_workflows():
    calls = [call(f"w{i}", 0, [i + 1], ts=0, last=True) for i in range(5)]
    r = WorkflowReplay(iter(calls), concurrency=2)
    assert r.next_arrival() == 0.0
    got = r.pop_arrivals(0.0)
    assert len(got) == 2
    r.finish(got[0][1], 3.0)
    (t, c), = r.pop_arrivals(3.0)
    assert t == 3.0 and c.workflow == "w2"


def test_workflow_without_last_flag_ends_at_end_of_file():
    calls = [call("w", 0, [1], ts=0), call("w", 1, [2])]
    r = WorkflowReplay(iter(calls))
    (_, c0), = r.pop_arrivals(0.0)
    _, ended = r.finish(c0, 1.0)
    assert ended is None
    (_, c1), = r.pop_arrivals(1.0)
    _, ended = r.finish(c1, 2.0)
    assert ended is not None


# ---------------------------------------------------------------- engine
def test_repeated_prompt_hits_and_new_prompt_misses():
    calls = [call("a", 0, [1, 2, 3, 4], ts=0, last=True), call("b", 0, [1, 2, 3, 4], ts=10_000, last=True),
             call("c", 0, [9, 8, 7, 6], ts=20_000, last=True)]
    _, m = simulate(calls)
    # b hits all 4 blocks but must compute its last token
    assert m.gpu_hit_tokens == 63 and m.prompt_tokens == 192
    assert m.prefill_tokens == 192 - 63
    assert m.calls == 3 and m.workflows == 3 and len(m.ttft) == 3


def test_cached_prefix_lowers_ttft():
    big = list(range(1, 257))
    calls = [call("a", 0, big, ts=0, last=True), call("b", 0, big[:-1] + [999], ts=60_000, last=True)]
    _, m = simulate(calls)
    assert m.ttft[1] < m.ttft[0] / 5


def test_think_time_and_e2e():
    calls = [call("w", 0, [1], ts=0), call("w", 1, [1, 2], think=3000, last=True)]
    _, m = simulate(calls)
    assert m.e2e[0] > 3.0 and m.calls == 2


def test_memory_pressure_queues_requests():
    # each request needs 10 of 12 blocks: they must run one after another
    calls = [call(f"w{i}", 0, [100 * i + k for k in range(8)], n_out=20, ts=0, last=True) for i in range(3)]
    sim, m = simulate(calls, gpu_blocks=12)
    assert m.calls == 3 and max(m.ttft) > 2 * min(m.ttft)
    sim.cache.check_invariants()


def test_oversize_calls_run_uncached():
    calls = [call("w", 0, list(range(1, 21)), ts=0, last=True)]
    _, m = simulate(calls, gpu_blocks=8)
    assert m.oversize_calls == 1 and m.calls == 1 and m.gpu_hit_tokens == 0


def test_host_tier_hit_costs_pcie_time():
    a = [1, 2, 3, 4]
    calls = [call("a", 0, a, n_out=0, ts=0, last=True), call("b", 0, [5, 6, 7, 8, 9], n_out=0, ts=1000, last=True),
             call("c", 0, a + [10], n_out=0, ts=2000, last=True)]
    sim, m = simulate(calls, gpu_blocks=5, host_blocks=8)
    assert m.host_hit_tokens == 64 and m.gpu_hit_tokens == 0
    assert m.h2d_bytes == 4 * 16 * PRESET.model.kv_bytes_per_token
    sim.cache.check_invariants()


def test_output_blocks_are_reused_by_the_next_call():
    calls = [call("w", 0, [1, 2], n_out=20, ts=0, out_ids=[3]),
             call("w", 1, [1, 2, 3, 4], last=True)]
    _, m = simulate(calls)
    assert m.gpu_hit_tokens == 48


def test_deterministic():
    calls = lambda: [call(f"w{i}", j, list(range(i * 10, i * 10 + j + 2)), ts=i * 100 if j == 0 else None,
                          last=j == 2) for i in range(6) for j in range(3)]
    _, m1 = simulate(calls(), gpu_blocks=20)
    _, m2 = simulate(calls(), gpu_blocks=20)
    s1, s2 = m1.summary(), m2.summary()
    for k in ("wall_s", "touches_per_s"):
        s1.pop(k), s2.pop(k)
    assert s1 == s2


def test_batching_respects_limits():
    calls = [call(f"w{i}", 0, [i * 10 + 1, i * 10 + 2], n_out=50, ts=0, last=True) for i in range(10)]
    _, m_one = simulate(calls, max_running=1)
    _, m_all = simulate(calls, max_running=256)
    assert m_one.last_finish > 3 * m_all.last_finish

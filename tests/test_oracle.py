"""The in-simulator clairvoyant bound: its future table, its eviction order, and how it relates to
the offline bounds and to LRU on generated workloads."""

import pytest

from agentrt.bench.runner import BenchOptions, run_bench, run_oracle, run_policy
from agentrt.bounds.offline import belady_bound
from agentrt.bench.source import workload_source
from agentrt.cache.block import GPU, Block
from agentrt.errors import AgentrtError
from agentrt.policies.oracle import NEVER, FutureUses, OraclePolicy
from agentrt.policies.registry import BOUNDS, SIM_BOUNDS, check_names
from agentrt.runtime import events as ev
from agentrt.trace.schema import Call
from agentrt.workloads.base import GenConfig

BS = 4
BS_W = 16   # block size of the generated workloads


def call(wf, i, ids, tenant="default"):
    return Call(workflow=wf, call=i, input_length=len(ids) * BS + 1, output_length=1, hash_ids=ids + [999],
                timestamp=0.0 if i == 0 else None, after=(i - 1,) if i else (), tenant=tenant)


def info(c, rid=1):
    return ev.CallInfo(rid=rid, workflow=c.workflow, agent=None, tenant=c.tenant, index=c.call,
                       hash_ids=c.hash_ids, input_length=c.input_length, output_length=1, block_size=BS)


def test_future_uses_follow_the_reference_order_and_are_consumed_once():
    calls = [call("a", 0, [1, 2]), call("b", 0, [1, 3]), call("a", 1, [1, 2, 4])]
    order = [("a", 0), ("b", 0), ("a", 1)]
    f = FutureUses(calls, order, BS)
    assert f.next_use("default", 1) == 0 and f.next_use("default", 2) == 0
    assert f.next_use("default", 3) == 1 and f.next_use("default", 4) == 2
    assert f.next_use("default", 999) == NEVER          # a partial block is never a use
    assert f.next_use("other", 1) == NEVER              # tenants never share
    assert f.consume("a", 0, "default", calls[0].hash_ids, 2)
    assert f.next_use("default", 1) == 1 and f.next_use("default", 2) == 2
    assert not f.consume("a", 0, "default", calls[0].hash_ids, 2)   # a re-admission changes nothing
    # admitted out of reference order: a's second call before b's call
    assert f.consume("a", 1, "default", calls[2].hash_ids, 3)
    assert f.next_use("default", 1) == 1 and f.next_use("default", 2) == NEVER
    assert f.next_use("default", 4) == NEVER


def test_calls_missing_from_the_reference_go_after_it():
    calls = [call("a", 0, [1]), call("z", 0, [1])]
    f = FutureUses(calls, [("a", 0)], BS)
    f.consume("a", 0, "default", [1], 1)
    assert f.next_use("default", 1) == 1


def test_oracle_evicts_never_used_first_then_farthest():
    calls = [call("a", 0, [1]), call("b", 0, [2]), call("a", 1, [1, 5])]
    f = FutureUses(calls, [("a", 0), ("b", 0), ("a", 1)], BS)
    p = OraclePolicy(f)
    root = Block(-1, None, GPU, "default")
    blocks = {h: Block(h, root, GPU, "default") for h in (1, 2, 7)}
    blocks[7].last_touch = 5
    keys = {h: p.score(b) for h, b in blocks.items()}
    assert keys[7] < keys[2] < keys[1]                  # 7 never used, 2 used before 1... by position
    p.observe(ev.CallAdmitted(0.0, info(calls[0]), blocks[1], 1, 0))
    assert p.score(blocks[1]) < p.score(blocks[2])      # 1 is next read after 2 now


def test_oversize_call_consumes_at_finish_and_bumps_the_epoch():
    c = call("a", 0, [1, 2])
    p = OraclePolicy(FutureUses([c], [("a", 0)], BS))
    p.observe(ev.CallFinished(1.0, info(c), None))
    assert p.epoch == 1 and p.future.next_use("default", 1) == NEVER


def test_oracle_is_a_bound_that_engines_refuse():
    assert "oracle" in BOUNDS and "oracle" in SIM_BOUNDS
    check_names(["oracle"])
    with pytest.raises(AgentrtError, match="simulator"):
        OraclePolicy()


def _bench(workload, policies, gpu_blocks, concurrency, workflows=40, **kw):
    src = workload_source(workload, GenConfig(workflows=workflows, seed=3, concurrency=concurrency))
    try:
        doc = run_bench(src, policies, BenchOptions(gpu_blocks=gpu_blocks, concurrency=concurrency, **kw))
    finally:
        src.close()
    return {k: v["hit_rate"] for k, v in doc["results"].items()}, doc


@pytest.mark.slow
@pytest.mark.parametrize("workload,gpu_blocks", [("mtbench", 300), ("mtbench", 400), ("swebench", 3000),
                                                 ("swebench", 4500), ("hover", 600), ("hover", 900)])
def test_at_concurrency_one_oracle_is_belady_up_to_the_running_calls_memory(workload, gpu_blocks):
    """One workflow at a time, the two clairvoyants differ only in the running call's working set
    (its prompt, partial and output blocks), which an engine must hold while it runs and `belady`
    may drop at once. So the oracle at capacity C lies between belady at C minus the largest
    working set and belady at C (equal once C is twice that), and at or above LRU."""
    src = workload_source(workload, GenConfig(workflows=40, seed=3, concurrency=1))
    try:
        opts = BenchOptions(gpu_blocks=gpu_blocks, concurrency=1)
        lru = run_policy(src, "lru", opts, record_stream=True)
        oracle, _ = run_oracle(src, opts, lru.admitted)
        ws = max(-(-(c.input_length + c.output_length) // BS_W) for c in src.eval_calls())
    finally:
        src.close()
    hit = oracle.metrics.summary()["hit_rate"]
    assert oracle.metrics.oversize_calls == 0
    assert hit >= lru.metrics.summary()["hit_rate"] - 1e-9
    upper = belady_bound(lru.stream, BS_W, gpu_blocks).hit_rate
    assert hit <= upper + 1e-9
    assert hit >= belady_bound(lru.stream, BS_W, max(1, gpu_blocks - ws)).hit_rate - 1e-9
    if gpu_blocks >= 2 * ws:
        assert hit == pytest.approx(upper, abs=1e-9)


@pytest.mark.slow
def test_oracle_bounds_online_policies_under_pressure():
    r, doc = _bench("mix", ["lru", "pbkv-lae", "cachesage", "oracle", "belady", "infinite"], 2500, 8)
    assert doc["config"]["oracle_passes"] >= 1
    for p in ("lru", "pbkv-lae", "cachesage"):
        assert r[p] <= r["oracle"] + 0.005, r
    assert r["oracle"] <= r["belady"] + 1e-9 <= r["infinite"] + 2e-9
    # the oracle is a simulator run: it has timings, belady does not
    assert doc["results"]["oracle"]["ttft_mean_s"] is not None
    assert doc["results"]["belady"]["ttft_mean_s"] is None


def test_best_of_passes_keeps_the_best_pass_and_stops_when_the_order_holds():
    from agentrt.policies.oracle import best_of_passes
    seen = []

    def replay(order, i):
        seen.append((order, i))
        hits = {"a": 5, "b": 9, "c": 7}[order]
        return hits, f"result-{order}", {"a": "b", "b": "c", "c": "c"}[order]
    assert best_of_passes("a", 5, replay) == ("result-b", 3)    # a -> b -> c, c admits in order c
    assert seen == [("a", 0), ("b", 1), ("c", 2)]
    assert best_of_passes("a", 1, replay) == ("result-a", 1)
    with pytest.raises(ValueError, match="passes must be >= 1"):
        best_of_passes("a", 0, replay)

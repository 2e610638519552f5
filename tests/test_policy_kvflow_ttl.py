"""KVFlow and TTL pins in small exact scenarios."""

from agentrt.cache import RadixKVCache
from agentrt.policies.kvflow import FAR, KVFlowPolicy
from agentrt.policies.ttl import TTLPolicy
from agentrt.runtime import events as ev
from agentrt.runtime.runtime import AgentRuntime
from agentrt.trace.schema import Call

BS = 16


def train_calls():
    out = []
    for w in range(3):
        for i, a in enumerate(["plan", "code", "test", "report"]):
            out.append(Call(workflow=f"t{w}", call=i, input_length=BS, output_length=1, hash_ids=[i],
                            agent=a, timestamp=0.0 if i == 0 else None, last=(i == 3)))
    return out


def test_kvflow_step_graph_distances():
    p = KVFlowPolicy()
    p.train(iter(train_calls()), BS)
    assert p.steps("plan", "code") == 1 and p.steps("plan", "report") == 3
    assert p.steps("report", "plan") == FAR


def run_call(cache, rt, rid, wf, agent, ids, t, tool=False):
    info = ev.CallInfo(rid=rid, workflow=wf, agent=agent, tenant="default", index=rid, hash_ids=ids,
                       input_length=len(ids) * BS, output_length=1, block_size=BS)
    rt.observe(ev.CallArrived(t, info))
    lease = cache.acquire("default", ids, len(ids), 0, t)
    cache.commit_prompt(lease, t)
    cache.release(lease, [], t)
    rt.observe(ev.CallFinished(t, info, lease.node, tool))
    return lease


def test_kvflow_evicts_the_farthest_agent_first():
    p = KVFlowPolicy()
    p.train(iter(train_calls()), BS)
    rt = AgentRuntime(p)
    cache = RadixKVCache(100, policy=p)
    rt.touch_clock = lambda: cache.touch_clock
    run_call(cache, rt, 1, "w", "report", [50, 51], 0.0)   # report: 3 steps from plan
    run_call(cache, rt, 2, "w", "code", [60, 61], 1.0)     # code: 1 step from plan
    run_call(cache, rt, 3, "w", "plan", [70, 71], 2.0)     # workflow now at plan
    run_call(cache, rt, 4, "done", "code", [80, 81], 3.0)
    rt.observe(ev.WorkflowEnded(3.0, "done", "default"))   # finished: goes first
    # plan will not run again and "done" has finished: both unreachable, LRU between them;
    # then report (3 steps from plan) before code (1 step)
    assert [b.hash for b in cache.peek_victims(4)] == [71, 81, 51, 61]


def test_ttl_pins_tool_calls_until_next_call_or_expiry():
    p = TTLPolicy(ttl=5.0)
    rt = AgentRuntime(p)
    cache = RadixKVCache(100, policy=p)
    run_call(cache, rt, 1, "w", "coder", [1, 2], 0.0, tool=True)     # pinned until 5.0
    run_call(cache, rt, 2, "x", "other", [9, 8], 1.0)
    assert [b.hash for b in cache.peek_victims(2)][0] == 8           # the pinned one is kept
    rt.observe(ev.BlocksEvicted(6.0, [], False))                     # time passes the TTL
    assert [b.hash for b in cache.peek_victims(2)][0] == 2           # LRU again
    run_call(cache, rt, 3, "w", "coder", [1, 2, 3], 7.0, tool=True)  # pinned again
    info = ev.CallInfo(rid=4, workflow="w", agent="tester", tenant="default", index=4, hash_ids=[5],
                       input_length=BS, output_length=1, block_size=BS)
    rt.observe(ev.CallArrived(8.0, info))                            # next call: released
    assert [b.hash for b in cache.peek_victims(1)][0] == 8


def test_ttl_mean_uses_the_agents_think_time():
    p = TTLPolicy(ttl="mean", ttl_s=1.0)
    rt = AgentRuntime(p)
    cache = RadixKVCache(100, policy=p)
    run_call(cache, rt, 1, "w", "coder", [1], 0.0, tool=True)
    info = ev.CallInfo(rid=2, workflow="w", agent="tester", tenant="default", index=1, hash_ids=[2],
                       input_length=BS, output_length=1, block_size=BS)
    rt.observe(ev.CallArrived(4.0, info))
    assert p._ttl_for("default", "coder") == 4.0

"""The runtime layer: identity inference, workflow lifecycles, agent profiles, block tags."""

from agentrt.cache import RadixKVCache
from agentrt.policies.lru import LRUPolicy
from agentrt.runtime import events as ev
from agentrt.runtime.policy import Policy
from agentrt.runtime.identity import anchor_agent
from agentrt.runtime.runtime import AgentRuntime
from agentrt.runtime.state import AgentProfile, threads_of

BS = 16


def info(rid, wf, ids, agent=None, tenant="default"):
    return ev.CallInfo(rid=rid, workflow=wf, agent=agent, tenant=tenant, index=0, hash_ids=ids,
                       input_length=len(ids) * BS, output_length=4, block_size=BS)


class Tagging(Policy):
    name = "tagging"
    wants_events = True
    needs_tags = True

    def __init__(self):
        super().__init__()
        self.seen = []

    def observe(self, e):
        self.seen.append(type(e).__name__)


def test_agent_inferred_from_anchor_when_not_named():
    rt = AgentRuntime(Tagging())
    sys_a = list(range(100, 120))     # 320 tokens of system prompt
    a1 = info(1, "w1", sys_a + [1, 2])
    a2 = info(2, "w2", sys_a + [7])
    b = info(3, "w3", list(range(500, 520)))
    for i in (a1, a2, b):
        rt.observe(ev.CallArrived(0.0, i))
    assert a1.agent == a2.agent != b.agent
    assert a1.agent.startswith("anchor:") and not a1.agent_explicit
    assert anchor_agent(sys_a + [1], (len(sys_a) + 1) * BS, BS) == a1.agent
    named = info(4, "w4", sys_a, agent="planner")
    rt.observe(ev.CallArrived(0.0, named))
    assert named.agent == "planner" and named.agent_explicit


def test_anchor_is_the_prefix_shared_across_workflows():
    p = AgentProfile("coder", "default")
    p.observe_prompt([1, 2, 3, 4, 5], 5, "w1", 100)
    p.observe_prompt([1, 2, 3, 4, 5, 6], 6, "w1", 100)   # same workflow: no evidence
    assert p.anchor == [1, 2, 3, 4, 5] and p.anchor_workflows == 1
    p.observe_prompt([1, 2, 3, 9], 4, "w2", 100)
    assert p.anchor == [1, 2, 3] and p.anchor_workflows == 2


def test_workflow_state_dropped_at_end_and_when_silent():
    rt = AgentRuntime(Tagging(), silent_after_s=10.0)
    rt.observe(ev.CallArrived(0.0, i1 := info(1, "done", [1, 2], "a")))
    rt.observe(ev.CallFinished(1.0, i1, None))
    rt.observe(ev.WorkflowEnded(1.0, "done", "default"))
    assert rt.workflow("default", "done") is None
    rt.observe(ev.CallArrived(2.0, i2 := info(2, "quiet", [3, 4], "a")))
    rt.observe(ev.CallFinished(3.0, i2, None))
    for k in range(300):  # the sweep runs every 256 events
        rt.observe(ev.BlocksEvicted(100.0 + k, [], False))
    assert rt.workflow("default", "quiet") is None
    assert rt.policy.seen.count("WorkflowEnded") == 2


def test_think_time_learned_per_agent():
    rt = AgentRuntime(Tagging())
    rt.observe(ev.CallArrived(0.0, c1 := info(1, "w", [1], "coder")))
    rt.observe(ev.CallFinished(1.0, c1, None, tool_call=True))
    rt.observe(ev.CallArrived(4.0, info(2, "w", [2], "tester")))
    assert rt.profile("default", "coder").mean_think_s == 3.0


def test_blocks_tagged_with_threads_on_finish():
    cache = RadixKVCache(100)
    rt = AgentRuntime(Tagging())
    lease = cache.acquire("default", [1, 2, 3], 3, 0, 0.0)
    cache.commit_prompt(lease, 0.0)
    c = info(1, "w", [1, 2, 3], "a")
    rt.observe(ev.CallArrived(0.0, c))
    cache.release(lease, [], 1.0)
    rt.observe(ev.CallFinished(1.0, c, lease.node))
    th = rt.workflows[("default", "w")].threads["a"]
    assert all(th in threads_of(b.meta) for b in lease.node.path())
    assert th.last_node is lease.node


def test_lru_needs_no_events():
    rt = AgentRuntime(LRUPolicy())
    assert not rt.wants_events


def test_the_policy_in_docs_runtime_md_runs():
    """The guide's example is real code: it registers and replays like any built-in policy."""
    import re
    from pathlib import Path

    from agentrt.policies.registry import _FACTORIES
    from test_policy_contract import agent_trace, simulate

    text = (Path(__file__).resolve().parents[1] / "docs" / "runtime.md").read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    try:
        exec(compile(code, "docs/runtime.md", "exec"), {})
        sim, m, violations = simulate("live-first", agent_trace(4), gpu_blocks=60)
        _, m_lae, _ = simulate("pbkv-lae", agent_trace(4), gpu_blocks=60)
    finally:
        _FACTORIES.pop("live-first", None)
    assert violations == [] and m.calls == len(agent_trace(4))
    assert m.gpu_hit_tokens == m_lae.gpu_hit_tokens     # it is pbkv-lae, as the guide says


def test_workflows_are_keyed_by_tenant_so_one_tenant_never_ends_anothers():
    """Two tenants' `run-42` are two workflows, in every host of the runtime (not only serve,
    which also prefixes its keys): B's call does not join A's workflow, B's end does not end it,
    and no transition is learned across them."""
    from agentrt.policies.cachesage import CacheSagePolicy
    p = CacheSagePolicy()
    rt = AgentRuntime(p)
    a = info(1, "run-42", [1, 2], "planner", tenant="A")
    b = info(2, "run-42", [3, 4], "coder", tenant="B")
    for t, c in ((0.0, a), (2.0, b)):
        rt.observe(ev.CallArrived(t, c))
        rt.observe(ev.CallFinished(t + 1, c, None))
    assert rt.workflow("A", "run-42").path == ["planner"]
    assert rt.workflow("B", "run-42").path == ["coder"]
    rt.observe(ev.WorkflowEnded(4.0, "run-42", "B"))
    assert rt.workflow("A", "run-42") is not None and rt.workflow("B", "run-42") is None
    assert rt.open_workflows("A") == 1 and rt.open_workflows() == 1
    assert p.learner.next_probs(("A", "planner")) == {}          # nothing learned from B's calls
    assert ("A", "run-42") in p._start and ("B", "run-42") not in p._start

"""CacheSage in small exact scenarios."""

from agentrt.engine.presets import get_preset
from agentrt.engine.simulator import EngineConfig, Simulator
from agentrt.policies.cachesage import CacheSagePolicy
from agentrt.policies.lru import LRUPolicy
from agentrt.policies.transitions import END, TransitionLearner
from agentrt.runtime import events as ev
from agentrt.runtime.actions import WarmUp
from agentrt.runtime.runtime import AgentRuntime

from test_policy_contract import BS, agent_trace


def test_sliding_window_transitions():
    t = TransitionLearner(window=4)
    for dst in "bbbb":
        t.observe("a", dst)
    assert t.next_probs("a") == {"b": 1.0}
    t.observe("a", "c")
    t.observe("a", "c")
    assert t.next_probs("a") == {"b": 0.5, "c": 0.5}   # the two oldest b's slid out


def test_bounded_bfs_reach():
    t = TransitionLearner()
    t.observe("a", "b")
    t.observe("b", "c")
    t.observe("c", "d")
    t.observe("b", END)
    r = t.reach("a", 2)
    assert r["b"] == (1, 1.0) and r["c"] == (2, 0.5) and "d" not in r


def feed(rt, wf, agents, t0=0.0, end=True):
    rid = hash(wf) % 10_000 * 100
    for i, a in enumerate(agents):
        info = ev.CallInfo(rid=rid + i, workflow=wf, agent=a, tenant="default", index=i,
                           hash_ids=[hash((a, k)) % 1000 for k in range(4)], input_length=4 * BS,
                           output_length=1, block_size=BS)
        rt.observe(ev.CallArrived(t0 + i, info))
        rt.observe(ev.CallFinished(t0 + i + 0.5, info, None))
    if end:
        rt.observe(ev.WorkflowEnded(t0 + len(agents), wf, "default"))


def test_survival_follows_learned_transitions():
    p = CacheSagePolicy()
    rt = AgentRuntime(p)
    for k in range(5):
        feed(rt, f"old{k}", ["plan", "code", "test"])
    feed(rt, "live", ["plan"], end=False)
    assert p.survival("default", "code") == 1.0        # plan -> code always
    assert p.survival("default", "test") == 1.0        # two hops away, within lookahead 3
    assert p.survival("default", "plan") == 0.0        # never follows itself here
    pred = p.predict(2)[("default", "live")]
    assert pred.steps[0] == {"code": 1.0} and pred.steps[1] == {"test": 1.0}


def test_with_nothing_learned_it_is_exactly_lru():
    # one-call workflows (Mooncake-like): no agent-to-agent transitions to learn
    calls = agent_trace(5, workflows=60)
    single = []
    for c in calls:
        if c.call == 0:
            c.last = True
            single.append(c)
    cfg = EngineConfig(preset=get_preset("llama3.1-8b-h100"), block_size=BS, gpu_blocks=40)
    m_lru = Simulator(cfg, LRUPolicy(), iter(single)).run().summary()
    m_cs = Simulator(cfg, CacheSagePolicy(), iter(single)).run().summary()
    for k in ("hit_rate", "prefill_tokens", "ttft_mean_s", "evictions"):
        assert m_lru[k] == m_cs[k], k


class View:
    idle = True
    block_size = BS

    def __init__(self, cached):
        self.cached = cached

    def gpu_prefix(self, tenant, ids):
        return self.cached


def test_warm_up_predicted_next_agent_when_idle():
    p = CacheSagePolicy()
    rt = AgentRuntime(p)
    for k in range(3):
        feed(rt, f"old{k}", ["plan", "code"])
    feed(rt, "live", ["plan"], end=False)      # waiting on its framework: next is code
    acts = p.act(10.0, View(cached=0))
    assert len(acts) == 1 and isinstance(acts[0], WarmUp)
    w = acts[0]
    assert w.agent == "code" and w.hash_ids == rt.profile("default", "code").anchor
    assert w.input_length == len(w.hash_ids) * BS + p.warmup_message_tokens
    assert p.act(11.0, View(cached=0)) == []   # already warming
    p2 = CacheSagePolicy()
    rt2 = AgentRuntime(p2)
    for k in range(3):
        feed(rt2, f"old{k}", ["plan", "code"])
    feed(rt2, "live", ["plan"], end=False)
    assert p2.act(10.0, View(cached=4)) == []  # anchor already on the GPU
    busy = View(cached=0)
    busy.idle = False
    assert p2.act(10.0, busy) == []


def test_warm_ups_are_not_learned_from():
    p = CacheSagePolicy()
    rt = AgentRuntime(p)
    w = ev.CallInfo(rid=1, workflow="__warmup__1", agent="code", tenant="default", index=0,
                    hash_ids=[1], input_length=20, output_length=1, block_size=BS, warmup=True)
    rt.observe(ev.CallArrived(0.0, w))
    rt.observe(ev.CallFinished(1.0, w, None))
    assert p.learner.observations == 0 and rt.workflows == {}

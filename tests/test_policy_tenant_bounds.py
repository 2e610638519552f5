"""The policies' per-agent tables are bounded max-min by tenant: a tenant inventing agent ids
drops its own entries, never another tenant's (CacheSage's transitions and warm-ups, PBKV-TA's
agent times, thread arrivals, anchors and forecast judge). Driven through the server's runtime
bridge, as a client would."""

from __future__ import annotations

import pytest

from agentrt.policies.pbkv import forecast_judge as fj
from agentrt.policies.transitions import TransitionLearner
from agentrt.runtime.window import TenantKeyed, window_in

pytest.importorskip("fastapi")
from agentrt.serve.identity import resolve_identity   # noqa: E402
from agentrt.serve.runtime_bridge import RuntimeBridge   # noqa: E402

USAGE = {"prompt_tokens": 100, "prompt_tokens_details": {"cached_tokens": 0}}


def call(b, tenant, agent, wf, system, end=False):
    body = {"model": "m", "messages": [{"role": "system", "content": system}, {"role": "user", "content": "go"}]}
    h = {"x-agent-id": agent, "x-workflow-id": wf}
    if end:
        h["x-workflow-end"] = "true"
    c = b.arrive("/v1/chat/completions", body, resolve_identity(h, body, b.next_call_number(), tenant))
    b.finish(c, 200, USAGE)


def test_tenant_keyed_drops_the_largest_tenants_oldest_key():
    dropped = []
    t = TenantKeyed(4, on_drop=lambda k, v: dropped.append(k))
    t[("b", "planner")] = 1
    for i in range(10):
        window_in(t, ("a", f"x{i}"), 4, list)
    assert ("b", "planner") in t and len(t) == 4
    assert dropped[0] == ("a", "x0") and all(k[0] == "a" for k in dropped)
    assert t.pop(("b", "planner")) == 1 and ("b", "planner") not in t
    del t[("a", "x9")]
    assert len(t) == 2


def test_transition_learner_keeps_a_quiet_tenants_sources():
    L = TransitionLearner(max_sources=8)
    L.observe(("b", "planner"), ("b", "coder"))
    for i in range(100):
        L.observe(("a", f"x{i}"), ("a", f"x{i + 1}"))
    assert L.next_probs(("b", "planner")) == {("b", "coder"): 1.0}
    assert L.sources() == 8 and L.dropped_sources == 93 and L.state_bytes() > 0
    one = TransitionLearner(max_sources=2)        # a one-tenant learner: plain least recent first
    for a in "xyz":
        one.observe(a, "w")
    assert one.next_probs("x") == {} and one.next_probs("z") == {"w": 1.0}


def test_forecast_judge_keeps_a_quiet_tenants_agents():
    j = fj.ForecastJudge(max_keys=8)
    for _ in range(40):
        j.record("b", "planner", 0.001, 0.9)
    assert j.prefers_online("b", "planner")
    for i in range(100):
        j.record("a", f"x{i}", 0.5, 0.5)
    assert j.prefers_online("b", "planner") and len(j) == 8


def test_cachesage_transitions_survive_another_tenants_invented_agents():
    b = RuntimeBridge("cachesage", kv_capacity_tokens=10**9)
    b.runtime.policy.learner = TransitionLearner(b.runtime.policy.learner.window, max_sources=64)
    for w in range(3):
        call(b, "team-b", "planner", f"b{w}", "B plan " * 40)
        call(b, "team-b", "coder", f"b{w}", "B code " * 40, end=True)
    learner = b.runtime.policy.learner
    want = learner.next_probs(("team-b", "planner"))
    assert want
    for w in range(3):
        for j in range(60):
            call(b, "team-a", f"x{w}-{j}", f"a{w}", "A " * 10)
    assert learner.dropped_sources > 0
    assert learner.next_probs(("team-b", "planner")) == want


def test_pbkv_ta_agent_tables_survive_another_tenants_invented_agents(monkeypatch):
    import agentrt.policies.pbkv.anchors as an
    import agentrt.policies.pbkv.time_aware as pt
    import agentrt.policies.pbkv.timing as tm
    monkeypatch.setattr(pt, "MAX_AGENT_KEYS", 50)
    monkeypatch.setattr(tm, "MAX_AGENT_KEYS", 50)
    monkeypatch.setattr(an, "MAX_AGENT_KEYS", 50)
    b = RuntimeBridge("pbkv-ta")
    p = b.runtime.policy
    for w in ("b1", "b2"):
        call(b, "team-b", "planner", w, "B plan " * 60)
        call(b, "team-b", "planner", w, "B plan " * 60)
    key = ("team-b", "planner")

    def held():
        return (key in p.times.svc, any(k[:2] == key for k in p.times.gap), key in p.anchors.of,
                key in p.anchors.starts)

    before = held()
    assert all(before)
    for i in range(60):
        for w in ("a", "c"):
            call(b, "team-a", f"x{i}", f"{w}{i}", f"agent {i} " * 60)
            call(b, "team-a", f"x{i}", f"{w}{i}", f"agent {i} " * 60)
    assert held() == before
    assert len(p.anchors.of) <= 50 and len(p.anchors.starts) <= 50 and len(p.times.svc) <= 50
    # every anchor the bound dropped left the tenant's hash table too
    held_agents = {a for t in p.anchors.table.values() for agents in t.values() for a in agents}
    assert held_agents <= {k[1] for k in p.anchors.of}

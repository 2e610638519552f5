"""Bounded runtime state: caps on open workflows (per tenant and in all), the timer sweep, and
policy loops whose cost follows what changed (counted, not timed)."""

from __future__ import annotations

import random

import pytest

from agentrt.policies.cachesage import CacheSagePolicy
from agentrt.policies.transitions import END
from agentrt.runtime import events as ev
from agentrt.runtime.policy import Policy
from agentrt.runtime.runtime import AgentRuntime

BS = 16


class Recorder(Policy):
    name = "recorder"
    wants_events = True

    def __init__(self) -> None:
        super().__init__()
        self.seen: list = []

    def observe(self, e) -> None:
        if type(e) is ev.WorkflowEnded:
            self.seen.append(("end", e.workflow, e.tenant, e.reason))
        elif type(e) is ev.CallArrived:
            self.seen.append(("arrive", e.call.workflow))

    def ends(self, reason: str | None = None) -> list[str]:
        return [s[1] for s in self.seen if s[0] == "end" and (reason is None or s[3] == reason)]


_rid = iter(range(1, 10**9))
W1 = ("default", "w1")


def _anchor(agent: str) -> list[int]:
    base = 10 * sum(map(ord, agent))
    return [base, base + 1]


def call(wf: str, tenant: str = "default", agent: str = "a", ids=None) -> ev.CallInfo:
    rid = next(_rid)
    if ids is None:                   # the agent's two anchor blocks, then the call's own
        ids = _anchor(agent) + [100_000 + rid]
    return ev.CallInfo(rid=rid, workflow=wf, agent=agent, tenant=tenant, index=0,
                       hash_ids=ids, input_length=len(ids) * BS, output_length=1, block_size=BS)


def arrive(rt, t, wf, tenant="default", agent="a"):
    c = call(wf, tenant, agent)
    rt.observe(ev.CallArrived(t, c))
    return c


def one_call(rt, t, wf, tenant="default", agent="a"):
    c = arrive(rt, t, wf, tenant, agent)
    rt.observe(ev.CallFinished(t + 0.5, c, None))
    return c


# ---------------------------------------------------------------------------- caps
def test_per_tenant_cap_ends_the_oldest_idle_workflow_of_that_tenant_only():
    p = Recorder()
    rt = AgentRuntime(p, max_workflows_per_tenant=3, max_workflows=None)
    for i, wf in enumerate(["w1", "w2", "w3"]):
        one_call(rt, i, wf, "A")
    one_call(rt, 3, "w1", "A")                  # w1 active again: w2 is now the oldest idle
    for i in range(5):
        one_call(rt, 4 + i, f"b{i}", "B")       # B's own cap: A untouched
    assert rt.open_workflows("A") == 3 and rt.forced_ends == 2
    assert p.ends("cap") == ["b0", "b1"]
    one_call(rt, 10, "w4", "A")
    assert p.ends("cap")[-1] == "w2" and rt.forced_ends == 3
    assert {w for _, w in rt.workflows} == {"w1", "w3", "w4", "b2", "b3", "b4"}
    # the policy saw the forced end before the call that needed the room
    i = p.seen.index(("end", "w2", "A", "cap"))
    assert p.seen[i + 1] == ("arrive", "w4")
    assert rt.stats()["forced_ends"] == 3 and rt.stats()["open_workflows"] == 6


def test_total_cap_ends_the_oldest_idle_workflow_of_any_tenant():
    p = Recorder()
    rt = AgentRuntime(p, max_workflows=4, max_workflows_per_tenant=None)
    one_call(rt, 0, "a1", "A")
    one_call(rt, 1, "b1", "B")
    one_call(rt, 2, "a2", "A")
    one_call(rt, 3, "b2", "B")
    one_call(rt, 4, "c1", "C")
    assert p.ends() == ["a1"] and rt.forced_ends == 1 and len(rt.workflows) == 4
    one_call(rt, 5, "c2", "C")
    assert p.ends() == ["a1", "b1"]
    assert rt.open_workflows("A") == 1 and rt.open_workflows("B") == 1 and rt.open_workflows("C") == 2


def test_a_workflow_with_a_call_in_flight_is_never_ended_by_a_cap():
    p = Recorder()
    rt = AgentRuntime(p, max_workflows_per_tenant=2)
    busy = arrive(rt, 0, "busy")                 # in flight, and the oldest
    one_call(rt, 1, "idle")
    arrive(rt, 2, "new")                         # over the cap: the idle one goes
    assert p.ends() == ["idle"] and {w for _, w in rt.workflows} == {"busy", "new"}
    arrive(rt, 3, "newer")                       # nothing idle: over the cap by calls in flight
    assert {w for _, w in rt.workflows} == {"busy", "new", "newer"} and rt.forced_ends == 1
    rt.observe(ev.CallFinished(4, busy, None))   # busy goes idle: the next new one ends it
    arrive(rt, 5, "newest")
    assert p.ends() == ["idle", "busy"] and rt.workflow("default", "busy") is None


def test_a_capped_workflow_reopens_afresh_and_the_policy_releases_it():
    p = CacheSagePolicy()
    rt = AgentRuntime(p, max_workflows_per_tenant=1)
    one_call(rt, 0, "w1", agent="plan")
    one_call(rt, 1, "w1", agent="code")
    one_call(rt, 2, "w2", agent="plan")          # caps w1 out
    assert W1 not in p._start and W1 not in p._idle.of and rt.forced_ends == 1
    assert p.learner.next_probs(("default", "code")) == {}     # a cap is no evidence of an END
    one_call(rt, 3, "w1", agent="test")
    assert rt.workflows[W1].path == ["test"] and ("default", "w2") not in rt.workflows


def test_caps_bound_memory_under_many_unended_workflows():
    p = CacheSagePolicy()
    rt = AgentRuntime(p, max_workflows_per_tenant=500, max_workflows=800)
    sizes = []
    for i in range(6000):
        one_call(rt, i * 0.01, f"w{i}", tenant=f"t{i % 2}", agent=f"a{i % 3}")
        if i in (1999, 5999):
            p.survival("t0", "a0")
            sizes.append(rt.state_bytes())
    assert len(rt.workflows) == 800 and rt.open_workflows("t0") == 400
    assert rt.forced_ends == 6000 - 800 and not rt._calls
    assert len(p._start) == 800 and sum(p._starts.values()) == 800
    assert sizes[1] <= sizes[0] * 1.01


def test_bad_caps_are_rejected():
    with pytest.raises(ValueError):
        AgentRuntime(Recorder(), max_workflows=0)
    with pytest.raises(ValueError):
        AgentRuntime(Recorder(), max_workflows_per_tenant=-1)


def test_a_policy_raising_at_an_end_does_not_leak_the_workflow():
    class Boom(Recorder):
        def observe(self, e):
            if type(e) is ev.WorkflowEnded:
                raise RuntimeError("boom")
            super().observe(e)
    rt = AgentRuntime(Boom(), silent_after_s=1.0)
    one_call(rt, 0, "w")
    with pytest.raises(RuntimeError):
        rt.observe(ev.WorkflowEnded(1, "w", "default"))
    one_call(rt, 2, "v")
    with pytest.raises(RuntimeError):
        rt.sweep(100)
    assert rt.workflows == {} and not rt.between_calls and rt.open_workflows("default") == 0


# ---------------------------------------------------------------------------- timer sweep
def test_timer_sweep_ends_silent_idle_workflows_without_any_event():
    p = Recorder()
    rt = AgentRuntime(p, silent_after_s=10.0)
    one_call(rt, 0, "old")
    one_call(rt, 5, "newer")
    arrive(rt, 1, "busy")                        # in flight: never silent
    assert rt.sweep(9.0) == 0                    # (no event came since: a timer calls this)
    assert rt.sweep(12.0) == 1 and p.ends("silent") == ["old"]
    assert rt.sweep(1000.0) == 1 and p.ends("silent") == ["old", "newer"]
    assert set(rt.workflows) == {("default", "busy")} and rt.silent_ends == 2
    assert rt.stats()["silent_ends"] == 2 and rt.stats()["calls_in_flight"] == 1


def test_sweep_examines_only_what_it_ends():
    """Idle workflows are kept least recently active first: a sweep stops at the first recent one."""
    rt = AgentRuntime(Recorder(), silent_after_s=10.0, max_workflows=None,
                      max_workflows_per_tenant=None)
    for i in range(5000):
        one_call(rt, 100.0 + i * 0.001, f"w{i}")
    looked = 0
    real = rt.between_calls.values

    class Counting:
        def __iter__(self):
            nonlocal looked
            for wf in real():
                looked += 1
                yield wf
    rt.between_calls.values = Counting          # type: ignore[method-assign]
    assert rt.sweep(100.5 + 10.0 + 0.0025) == 3   # w0, w1, w2 (finished at 100.5 + i ms)
    assert looked <= 4


# ---------------------------------------------------------------------------- CacheSage's loops
class View:
    idle = True
    block_size = BS

    def gpu_prefix(self, tenant, ids):
        return 0


def test_cachesage_loops_visit_distinct_agents_not_open_workflows():
    p = CacheSagePolicy()
    rt = AgentRuntime(p, max_workflows=None, max_workflows_per_tenant=None)
    for k in range(4):                           # learn plan -> code -> test, anchors confirmed
        for j, a in enumerate(["plan", "code", "test"]):
            c = call(f"train{k}", agent=a)
            rt.observe(ev.CallArrived(k * 10 + j, c))
            rt.observe(ev.CallFinished(k * 10 + j + 0.5, c, None))
        rt.observe(ev.WorkflowEnded(k * 10 + 3, f"train{k}", "default"))
    for i in range(10_000):                      # 10,000 idle workflows at three agents
        one_call(rt, 100 + i * 1e-4, f"w{i}", agent=("plan", "code", "test")[i % 3])
    p.survival("default", "code")
    runs, visits = p.reach_runs, p.act_visits
    one_call(rt, 200, "w5", agent="code")        # one workflow changes
    assert p.survival("default", "test") > 0
    assert p.reach_runs - runs <= 3              # one BFS per distinct agent, not per workflow
    acts = p.act(201, View())
    assert acts and acts[0].agent == "code"      # plan -> code, from the longest-idle plan workflow
    assert p.act_visits - visits <= 3
    p.act(202, View())                           # code is warming now: the next candidates
    assert p.act_visits - visits <= 6


def _ref_survival(p) -> dict:
    """CacheSage's survival as the reference loop over every live workflow computes it."""
    keep: dict = {}
    for wf in p.runtime.workflows.values():
        if not wf.path or wf.ended:
            continue
        for a, (_, q) in p.learner.reach((wf.tenant, wf.path[-1]), p.lookahead).items():
            keep[a] = keep.get(a, 1.0) * (1.0 - q)
    return {a: 1.0 - q for a, q in keep.items()}


def _ref_act(p, tenant: str) -> tuple | None:
    """The warm-up the reference loop over every idle workflow of `tenant` picks, longest idle
    first: (tenant, agent)."""
    for wf in p.runtime.between_calls.values():
        if wf.running or not wf.path or wf.tenant != tenant:
            continue
        probs = p.learner.next_probs((wf.tenant, wf.path[-1]))
        if not probs:
            continue
        nxt, q = max(probs.items(), key=lambda kv: (kv[1], str(kv[0])))
        if nxt == END or q < p.warmup_min_prob or nxt in p._warming:
            continue
        prof = p.runtime.profile(*nxt)
        if prof is None or prof.anchor_workflows < 2 or not prof.anchor:
            continue
        return nxt
    return None


@pytest.mark.parametrize("seed", range(5))
def test_cachesage_incremental_state_matches_the_full_scan(seed):
    rng = random.Random(seed)
    p = CacheSagePolicy(warmup_min_prob=0.3)
    rt = AgentRuntime(p, silent_after_s=30.0, max_workflows=40, max_workflows_per_tenant=25,
                      max_agents=12)
    agents = ["plan", "code", "test", "review", "fix"]
    inflight: list = []
    t = 0.0
    for step in range(3000):
        t += rng.random()
        r = rng.random()
        if r < 0.45:
            wf, tenant = f"w{rng.randrange(60)}", f"t{rng.randrange(2)}"
            open_in = [t for t in ("t0", "t1") if (t, wf) in rt.workflows]
            if open_in:
                tenant = open_in[0]
            a = rng.choice(agents) + ("" if rng.random() < 0.9 else str(rng.randrange(20)))
            c = call(wf, tenant, a, ids=_anchor(tenant + a) + [rng.randrange(10**6)])
            rt.observe(ev.CallArrived(t, c))
            inflight.append(c)
        elif r < 0.85 and inflight:
            c = inflight.pop(rng.randrange(len(inflight)))
            rt.observe(ev.CallFinished(t, c, None))
        elif r < 0.93:
            wf = f"w{rng.randrange(60)}"
            tenant = next((t for t in ("t0", "t1") if (t, wf) in rt.workflows), "t0")
            rt.observe(ev.WorkflowEnded(t, wf, tenant))
        else:
            rt.sweep(t)
        if step % 50 == 0:
            ref = _ref_survival(p)
            got = {a: p.survival(*a) for a in ref}
            assert set(p._survival) == set(ref)
            for a, v in ref.items():
                assert got[a] == pytest.approx(v, rel=1e-12, abs=1e-15)
            for wf in rt.workflows.values():
                if wf.path:
                    assert p._start[wf.key] == (wf.tenant, wf.path[-1])
            assert set(p._start) == {w for w, s in rt.workflows.items() if s.path}
            assert list(p._idle.of) == list(rt.between_calls)      # same members, same order
            anchors: dict = {}
            for (tenant, _), prof in rt.agents.items():
                if prof.anchor_workflows >= 2 and prof.anchor:
                    anchors.setdefault(tenant, set()).update(prof.anchor)
            assert {k: set(v) for k, v in p._anchors.items()} == anchors
            # tenants take turns; within one, the longest-idle workflow that can be warmed wins
            want = {tenant: _ref_act(p, tenant) for tenant in ("t0", "t1")}
            acts = p.act(t, View())
            assert bool(acts) == any(want.values())
            if acts:
                assert (acts[0].tenant, acts[0].agent) == want[acts[0].tenant]
    assert rt.forced_ends > 0 and rt.silent_ends > 0 and rt.profiles_dropped > 0


def _learn_plan_code(rt, tenant: str, t0: float) -> None:
    """Two workflows of `tenant` call plan then code and end: plan -> code learned, anchors confirmed."""
    for k in range(2):
        for j, a in enumerate(["plan", "code"]):
            one_call(rt, t0 + k * 10 + j, f"train{k}", tenant, a)
        rt.observe(ev.WorkflowEnded(t0 + k * 10 + 3, f"train{k}", tenant))


@pytest.mark.slow
def test_cachesage_act_does_not_grow_with_invented_agent_ids():
    """65,536 idle workflows, each at an agent id of its own (a tenant inventing ids): an `act`
    visits at most `act_max_visits` starts, each invented id costs one visit ever (nothing was
    learned from it: it is parked), and another tenant's warm-up comes in the first act."""
    p = CacheSagePolicy()
    rt = AgentRuntime(p, max_workflows=None, max_workflows_per_tenant=None, max_agents=1 << 17)
    _learn_plan_code(rt, "good", 0.0)
    for i in range(1 << 16):
        one_call(rt, 100 + i * 1e-5, f"w{i}", "evil", f"invented-{i}")
    one_call(rt, 200, "live", "good", "plan")        # waits after plan: code is predicted next
    visits = p.act_visits
    acts = p.act(201, View())
    assert [(a.tenant, a.agent) for a in acts] == [("good", "code")]
    assert p.act_visits - visits <= p.act_max_visits
    ticks = 0
    while len(p._idle._parked) < 1 << 16:           # every invented id visited once, then parked
        before = p.act_visits
        p.act(202 + ticks, View())
        assert p.act_visits - before <= p.act_max_visits
        ticks += 1
    assert ticks <= (1 << 16) // p.act_tenant_visits + 1
    assert p.act_visits - visits <= (1 << 16) + 2 * (ticks + 1)
    before = p.act_visits
    assert p.act(700, View()) == [] and p.act_visits - before <= 1     # only good's (warming) start


def test_cachesage_act_bounds_the_visits_of_starts_that_stay_blocked():
    """Starts with a learned successor that cannot be warmed now (it is being warmed) stay in the
    scan, but one tenant's many of them take at most `act_tenant_visits` of an act, so another
    tenant is still reached within the act."""
    p = CacheSagePolicy(act_max_visits=100, act_tenant_visits=10)
    rt = AgentRuntime(p, max_workflows=None, max_workflows_per_tenant=None)
    _learn_plan_code(rt, "good", 0.0)
    for i in range(500):                             # evil: x_i -> hub learned, then idle at x_i
        one_call(rt, 50 + i * 0.01, f"teach{i}", "evil", f"x{i}")
        one_call(rt, 50 + i * 0.01 + 0.001, f"teach{i}", "evil", "hub")
        one_call(rt, 60 + i * 0.01, f"idle{i}", "evil", f"x{i}")
    p._warming[("evil", "hub")] = 0.0               # hub is being warmed: every x_i is blocked
    one_call(rt, 200, "live", "good", "plan")
    for t in range(3):
        before = p.act_visits
        acts = p.act(201 + t, View())
        assert p.act_visits - before <= 10 + 1 + 1
        if acts:
            break
    assert [(a.tenant, a.agent) for a in acts] == [("good", "code")]


@pytest.mark.parametrize("seed", range(3))
def test_idle_starts_scan_order_survives_rebuilds(seed):
    """Many joins and leaves (past the stale-entry rebuild, joins of new starts included): a scan
    that judges every start visits each unparked start once, each tenant's longest idle first."""
    from agentrt.policies.idle_starts import BARREN, IdleStarts
    rng = random.Random(seed)
    idle = IdleStarts()
    for step in range(20_000):
        wf = ("t%d" % rng.randrange(2), f"w{rng.randrange(300)}")
        if wf in idle.of and rng.random() < 0.5:
            idle.leave(wf)
        else:
            idle.leave(wf)
            idle.join(wf, (wf[0], f"a{rng.randrange(400)}"))
        if step % 3989 == 3988:              # between scans, stale entries pass the rebuild mark
            barren = {s for s in idle.groups if hash(s) % 7 == 0}
            seen: list = []

            def judge(start):
                seen.append(start)
                return BARREN if start in barren else None
            idle.scan(judge, 10**6, 10**6)
            for s in barren:
                idle.revive(s)
            assert sorted(seen) == sorted(idle.groups)
            for tenant in ("t0", "t1"):
                mine = [s for s in seen if s[0] == tenant]
                assert mine == sorted(mine, key=lambda s: next(iter(idle.groups[s].values())))

"""`agent`: learned per-class workflow sizes (`WorkflowSizes`, checked against a brute-force
conditional mean), workflow classes from the entry agent, and the resulting order of waiting
calls, from hand-built events and a fake queue view."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrt.runtime import events as ev
from agentrt.runtime.identity import anchor_agent
from agentrt.sched.agent import AgentScheduler, WorkflowSizes

from sched_fakes import BS, View, info  # noqa: E402


def order(sched, calls, view):
    return [c.rid for c, a in sorted(calls, key=lambda ca: sched.rank(ca[0], ca[1], view))]


def run_workflow(s, wf, agent, works, tenant="t", rid0=1000, now=0.0):
    """Feed `s` a whole workflow whose calls each attain `work` tokens of prefill (no output),
    then its end. Returns the total work."""
    total = 0
    for i, w in enumerate(works):
        c = info(rid0 + i, wf=wf, tenant=tenant, agent=agent, n_in=w, n_out=0, index=i)
        s.observe(ev.CallArrived(now, c))
        s.observe(ev.CallAdmitted(now, c, None, 0, 0))
        s.observe(ev.CallFinished(now, c, None))
        total += w
    s.observe(ev.WorkflowEnded(now, wf, tenant))
    return total


# ------------------------------------------------------------------ WorkflowSizes
def brute_remaining(samples, window, attained):
    kept = samples[-window:]
    larger = [t for t in kept if t > attained]
    if not larger:
        return float(attained)
    return sum(larger) / len(larger) - attained


@settings(max_examples=300, deadline=None)
@given(ops=st.lists(st.one_of(st.tuples(st.just("add"), st.integers(0, 60)),
                              st.tuples(st.just("ask"), st.integers(-5, 70))), max_size=60),
       window=st.integers(1, 8))
def test_workflow_sizes_remaining_is_the_conditional_mean_over_the_window(ops, window):
    ws = WorkflowSizes(window)
    added = []
    for op, x in ops:
        if op == "add":
            ws.add(x)
            added.append(x)
            assert len(ws) == min(len(added), window)
        else:
            assert ws.remaining(x) == pytest.approx(brute_remaining(added, window, x), abs=1e-9)
    for x in (-1, 0, 30, 61):
        assert ws.remaining(x) == pytest.approx(brute_remaining(added, window, x), abs=1e-9)


def test_workflow_sizes_small_cases():
    ws = WorkflowSizes(3)
    assert ws.remaining(7) == 7.0                       # nothing known: least attained service
    for t in (10, 20, 60):
        ws.add(t)
    assert ws.remaining(0) == pytest.approx(30.0)       # mean of all
    assert ws.remaining(10) == pytest.approx(30.0)      # E[T | T > 10] = 40, minus 10
    assert ws.remaining(59) == pytest.approx(1.0)
    assert ws.remaining(60) == 60.0                     # longer than any seen
    ws.add(100)                                         # 10 leaves the window
    assert ws.remaining(0) == pytest.approx(60.0)


# ------------------------------------------------------------------ the scheduler
def test_without_history_agent_is_las_plus_uncached_prefill():
    s = AgentScheduler()
    a0 = info(1, wf="a", agent="orch", n_in=4 * BS)
    for e in (ev.CallArrived(0, a0), ev.CallAdmitted(0, a0, None, 0, 0), ev.CallFinished(0, a0, None)):
        s.observe(e)
    a1 = info(2, wf="a", agent="coder", n_in=6 * BS, index=1)
    b0 = info(3, wf="b", agent="orch", n_in=6 * BS)
    s.observe(ev.CallArrived(0, b0))
    v = View(now=1.0, cached={2: 6})
    attained_a = 4 * BS + 10
    assert s.expected_remaining(a1) == attained_a and s.expected_remaining(b0) == 0
    assert s.key(a1, 0.5, v) == (attained_a + 1, 0.5)       # fully cached: one token to compute
    assert s.key(b0, 0.6, v) == (6 * BS, 0.6)
    assert order(s, [(a1, 0.5), (b0, 0.6)], v) == [2, 3]     # 75 < 96
    v.cached = {}
    assert order(s, [(a1, 0.5), (b0, 0.6)], v) == [3, 2]     # a1 cold: 74 + 96 > 96
    assert s.priority(a1, 0.5, v) == attained_a + 6 * BS


def test_learned_sizes_favour_the_workflow_expected_to_end_soon():
    s = AgentScheduler()
    # class ("t", "short") workflows total 100 tokens; class ("t", "long") ones 10_000
    for k in range(5):
        run_workflow(s, f"s{k}", "short", [50, 50], rid0=100 * k)
        run_workflow(s, f"l{k}", "long", [2000] * 5, rid0=10_000 + 100 * k)
    assert set(s.classes) == {("t", "short"), ("t", "long")}
    assert len(s.classes[("t", "long")]) == 5
    assert s.workflow_class == {} and s.service.work == {}          # ended workflows are dropped
    # a new long workflow, before any work, vs a new short one that already attained 60 tokens:
    # under las the long one would go first; under agent the short one (40 left) does
    long0 = info(1, wf="L", agent="long", n_in=BS)
    short0 = info(2, wf="S", agent="short", n_in=BS)
    short1 = info(3, wf="S", agent="worker", n_in=BS, index=1)   # the class is the entry agent's
    for e in (ev.CallArrived(0, long0), ev.CallArrived(0, short0),
              ev.CallAdmitted(0, short0, None, 0, 0),
              ev.CallFinished(0, short0, None), ev.CallArrived(0, short1)):
        s.observe(e)
    assert s.workflow_class[("t", "S")] == ("t", "short")
    assert s.service.work[("t", "S")] == BS + 10
    assert s.expected_remaining(short1) == pytest.approx(100 - (BS + 10))
    assert s.expected_remaining(long0) == pytest.approx(10_000)
    v = View(now=1.0)
    assert order(s, [(long0, 0.0), (short1, 0.5)], v) == [3, 1]
    # a short-class workflow longer than any seen falls back to its attained service
    s.observe(ev.CallAdmitted(0, short1, None, 0, 0))
    s.observe(ev.CallAdmitted(0, info(4, wf="S", agent="short", n_in=200, index=2), None, 0, 0))
    assert s.expected_remaining(short1) == pytest.approx(s.service.work[("t", "S")])
    assert s.service.work[("t", "S")] > 100


def test_classes_are_per_tenant_and_default_to_the_prompt_anchor():
    s = AgentScheduler()
    run_workflow(s, "x", "orch", [500], tenant="t1")
    new_t2 = info(1, wf="y", tenant="t2", agent="orch")
    new_t1 = info(2, wf="y", tenant="t1", agent="orch")
    s.observe(ev.CallArrived(0, new_t2))
    s.observe(ev.CallArrived(0, new_t1))
    assert s.expected_remaining(new_t1) == pytest.approx(500) and s.expected_remaining(new_t2) == 0
    anon = info(3, wf="z", agent=None, n_in=20 * BS, ids=list(range(1, 21)))
    s.observe(ev.CallArrived(0, anon))
    assert s.workflow_class[("t", "z")] == ("t", anchor_agent(anon.hash_ids, anon.input_length, BS))
    assert s.workflow_class[("t", "z")] == ("t", "anchor:16")        # 256 tokens / 16 = 16th block
    # warm-ups never start a workflow class
    s.observe(ev.CallArrived(0, info(4, wf="warm", agent="w", warmup=True)))
    assert ("t", "warm") not in s.workflow_class


def test_window_bounds_the_samples_and_max_classes_bounds_the_table():
    s = AgentScheduler(window=2, max_classes=3)
    for k, total in enumerate([1000, 10, 20]):
        run_workflow(s, f"w{k}", "a", [total], rid0=10 * k)
    assert len(s.classes[("t", "a")]) == 2
    c = info(1, wf="new", agent="a", n_in=BS)
    s.observe(ev.CallArrived(0, c))
    assert s.expected_remaining(c) == pytest.approx(15.0)        # 1000 left the window
    for k in range(4):
        run_workflow(s, f"v{k}", f"agent{k}", [10], rid0=100 + 10 * k)
    assert len(s.classes) == 3 and ("t", "agent3") in s.classes
    assert s.state_bytes() > 0


def test_a_later_call_does_not_change_the_workflow_class():
    s = AgentScheduler()
    run_workflow(s, "big", "big", [9000])
    c0 = info(1, wf="w", agent="small")
    s.observe(ev.CallArrived(0, c0))
    c1 = info(2, wf="w", agent="big", index=1)
    s.observe(ev.CallArrived(0, c1))
    assert s.workflow_class[("t", "w")] == ("t", "small")
    assert s.expected_remaining(c1) == 0.0

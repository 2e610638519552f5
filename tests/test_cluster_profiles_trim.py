"""The agent router's live-workflow book drops silent workflows in order of last activity (a
routed call or a finished one), whatever calls are still in flight elsewhere."""

from __future__ import annotations

from agentrt.cluster.agent import AgentRouter
from agentrt.cluster.profiles import WorkflowBook
from agentrt.cluster.routing import ClusterHints, RouteRequest


def req(wf: str, i: int = 0) -> RouteRequest:
    return RouteRequest(tenant="t", workflow=wf, agent="a", prompt_tokens=64, output_tokens=16,
                        hash_ids=[hash((wf, j)) & (2**62 - 1) for j in range(4)], call_index=i)


def router() -> AgentRouter:
    r = AgentRouter(silent_after_s=600.0)
    r.bind(ClusterHints(block_size=16))
    return r


def test_a_call_that_never_finishes_holds_only_its_own_workflow():
    r = router()
    stuck = req("stuck")
    r.on_routed(stuck, 0, 0.0)
    for k in range(500):
        q, t = req(f"w{k}"), 1.0 + k * 0.01
        r.on_routed(q, k % 4, t)
        r.on_finished(q, k % 4, t + 0.5)      # served, never ended
    r.on_routed(req("late"), 1, 100_000.0)
    assert set(r.workflows.live) == {("t", "stuck"), ("t", "late")}
    assert r.workflows.footprint == [80.0, 80.0, 0.0, 0.0]


def test_a_late_finish_moves_its_workflow_behind_the_silent_ones():
    r = router()
    long = req("long")
    r.on_routed(long, 0, 0.0)
    for k in range(100):
        q = req(f"w{k}")
        r.on_routed(q, 1, 1.0 + k * 0.001)
        r.on_finished(q, 1, 2.0)
    r.on_finished(long, 0, 900.0)             # finishes late: active at 900
    r.on_routed(req("x"), 2, 1000.0)          # every w* silent for 998 s
    assert set(r.workflows.live) == {("t", "long"), ("t", "x")}
    r.on_routed(req("y"), 3, 1501.0)          # long silent for 601 s; x has a call in flight
    assert set(r.workflows.live) == {("t", "x"), ("t", "y")}


def test_order_and_idle_set_follow_activity():
    b = WorkflowBook(max_workflows=3, silent_after_s=10.0)
    b.routed("t", "a", "g", 0, 0.0, 10)
    b.routed("t", "b", "g", 1, 1.0, 10)
    b.finished("t", "a", "g", 2.0)            # a: now the most recently active
    assert list(b.live) == [("t", "b"), ("t", "a")] and list(b.idle) == [("t", "a")]
    b.routed("t", "a", "g", 0, 3.0, 20)       # in flight again: not idle
    assert not b.idle
    b.routed("t", "c", "g", 2, 4.0, 10)
    b.routed("t", "d", "g", 3, 5.0, 10)       # over max_workflows: b, the least recently active, goes
    assert list(b.live) == [("t", "a"), ("t", "c"), ("t", "d")]
    assert b.footprint == [20.0, 0.0, 10.0, 10.0]
    b.finished("t", "c", "g", 6.0)
    b.ended("t", "c")
    assert ("t", "c") not in b.live and not b.idle
    b.finished("t", "a", "g", 7.0)
    b.finished("t", "d", "g", 8.0)
    b.routed("t", "e", "g", 0, 17.5, 5)      # a silent 10.5 s: dropped; d (9.5 s) stays
    assert list(b.live) == [("t", "d"), ("t", "e")] and list(b.idle) == [("t", "d")]
    assert b.footprint == [5.0, 0.0, 0.0, 10.0]


def test_state_stays_bounded_under_churn():
    b = WorkflowBook(max_workflows=50, silent_after_s=5.0)
    for k in range(5000):
        b.routed("t", f"w{k}", "g", k % 3, float(k), 8)
        if k % 7:
            b.finished("t", f"w{k}", "g", float(k) + 0.5)
        assert len(b.live) <= 50 and set(b.idle) <= set(b.live)
    placed = [sum(8 for w in b.live.values() for th in w.threads.values() if th.replica == i)
              for i in range(3)]
    assert b.footprint == placed

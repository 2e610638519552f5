"""The scheduler interface (`sched/base.py`), the registry, and the published baselines `lpm` and
`las` (`sched/basic.py`), driven by hand-built runtime events and a fake queue view."""

from __future__ import annotations

import pytest

from agentrt.errors import AgentrtError
from agentrt.runtime import events as ev
from agentrt.sched.base import DEFAULT_MAX_WAIT_S, Scheduler
from agentrt.sched.basic import LASScheduler, LPMScheduler
from agentrt.sched.registry import (DEFAULT_SCHEDULER, check_scheduler, describe_scheduler, make_scheduler,
                                    scheduler_names)
from agentrt.sched.service import AttainedService, prefill_work

from sched_fakes import BS, View, info  # noqa: E402


def order(sched, calls, view):
    """rids in admission order: calls = [(CallInfo, arrival)]."""
    return [c.rid for c, a in sorted(calls, key=lambda ca: sched.rank(ca[0], ca[1], view))]


def admitted(c, gpu_hit=0, host_hit=0, now=0.0):
    return ev.CallAdmitted(now, c, None, gpu_hit, host_hit)


def finished(c, now=0.0):
    return ev.CallFinished(now, c, None)


# ------------------------------------------------------------------ registry
def test_registry_names_and_descriptions():
    names = scheduler_names()
    assert names[0] == DEFAULT_SCHEDULER == "fcfs"
    assert set(names) == {"fcfs", "lpm", "las", "fair", "agent"} and len(names) == len(set(names))
    for n in names:
        assert describe_scheduler(n), n
        s = make_scheduler(n)
        assert s.name == n and isinstance(s, Scheduler)
        assert s.max_wait_s == DEFAULT_MAX_WAIT_S
        check_scheduler(n)
    assert describe_scheduler("nope") == ""


def test_registry_flags_match_the_documented_behaviour():
    s = {n: make_scheduler(n) for n in scheduler_names()}
    assert not s["fcfs"].reorders and not s["fcfs"].skips_blocked and not s["fcfs"].wants_events
    assert all(s[n].reorders for n in ("lpm", "las", "fair", "agent"))
    assert s["agent"].skips_blocked and s["fair"].skips_blocked
    assert not s["lpm"].skips_blocked and not s["las"].skips_blocked
    assert s["lpm"].reads_cache and s["agent"].reads_cache and not s["las"].reads_cache
    assert getattr(s["fair"], "kv_shares", False)
    assert not any(getattr(s[n], "kv_shares", False) for n in ("fcfs", "lpm", "las", "agent"))


def test_unknown_scheduler_lists_the_valid_names():
    with pytest.raises(AgentrtError) as e:
        make_scheduler("nope")
    msg = str(e.value)
    assert "unknown scheduler 'nope'" in msg
    for n in scheduler_names():
        assert n in msg
    with pytest.raises(AgentrtError, match="unknown scheduler 'FCFS'"):
        check_scheduler("FCFS")


@pytest.mark.parametrize("name", ["fcfs", "lpm", "las", "fair", "agent"])
@pytest.mark.parametrize("bad", [-1.0, 0.0, float("nan")])
def test_non_positive_max_wait_is_a_clear_user_error(name, bad):
    with pytest.raises(AgentrtError) as e:
        make_scheduler(name, max_wait_s=bad)
    msg = str(e.value)
    assert f"scheduler '{name}'" in msg and "max_wait_s must be" in msg and "> 0" in msg


def test_unknown_option_is_a_user_error_not_a_type_error():
    with pytest.raises(AgentrtError, match="bad option for scheduler 'lpm'"):
        make_scheduler("lpm", weights="a:1")
    with pytest.raises(AgentrtError, match="bad option for scheduler 'agent'.*window"):
        make_scheduler("agent", window=0)


@pytest.mark.parametrize("weights, why", [
    ("a:0", "must be a finite number > 0"),
    ("a:-2", "must be a finite number > 0"),
    ("a:inf", "must be a finite number > 0"),
    ("a:nan", "must be a finite number > 0"),
    ("a", "expected TENANT:WEIGHT"),
    (":2", "expected TENANT:WEIGHT"),
    ("a:2,,b:1", "expected TENANT:WEIGHT"),
    ("a:x", "x"),
    ({"a": -1}, "must be a finite number > 0"),
    ({"a": "2"}, "must be a finite number > 0"),
    (["a", 2], "mapping"),
])
def test_bad_tenant_weights_are_user_errors(weights, why):
    with pytest.raises(AgentrtError) as e:
        make_scheduler("fair", weights=weights)
    assert "bad option for scheduler 'fair'" in str(e.value) and why in str(e.value)


def test_good_tenant_weights_parse():
    assert make_scheduler("fair", weights="a:2, b:0.5").weights == {"a": 2.0, "b": 0.5}
    assert make_scheduler("fair", weights="ns:a:3").weights == {"ns:a": 3.0}   # the last ':' splits
    assert make_scheduler("fair", weights={"a": 2}).weights == {"a": 2.0}
    assert make_scheduler("fair", weights="").weights == {}
    assert make_scheduler("fair").weight("anyone") == 1.0


# ------------------------------------------------------------------ base: FCFS and aging
def test_fcfs_keeps_arrival_order_and_static_priority_zero():
    s = Scheduler()
    calls = [(info(3), 0.3), (info(1), 0.1), (info(2), 0.2)]
    v = View(now=1.0)
    assert order(s, calls, v) == [1, 2, 3]
    assert all(s.priority(c, a, v) == 0 for c, a in calls)
    assert v.asked == []         # FCFS never reads the cache


def test_rank_puts_aged_calls_first_in_arrival_order():
    class Reverse(Scheduler):
        reorders = True

        def key(self, call, arrival, view):
            return -call.rid          # the newest call first

    s = Reverse(max_wait_s=5.0)
    calls = [(info(1), 0.0), (info(2), 1.0), (info(3), 4.0), (info(4), 9.0)]
    assert order(s, calls, View(now=5.0)) == [4, 3, 2, 1]      # nothing has waited more than 5 s
    # at 5.5 only rid 1 has waited more than 5 s; at 6.5 rids 1 and 2 (1 first: it arrived first)
    assert order(s, calls, View(now=5.5)) == [1, 4, 3, 2]
    assert order(s, calls, View(now=6.5)) == [1, 2, 4, 3]
    assert order(s, calls, View(now=100.0)) == [1, 2, 3, 4]
    assert not s.aged(0.0, 5.0) and s.aged(0.0, 5.0001)      # strictly longer than max_wait_s


def test_priority_is_the_rounded_leading_key_clamped():
    class Lead(Scheduler):
        reorders = True

        def __init__(self, k):
            super().__init__()
            self.k = k

        def key(self, call, arrival, view):
            return self.k

    c, v = info(1), View()
    assert Lead((2.6, 0.0)).priority(c, 0.0, v) == 3
    assert Lead(-7.4).priority(c, 0.0, v) == -7
    assert Lead((1e30, 1)).priority(c, 0.0, v) == 2 ** 62
    assert Lead((-1e30, 1)).priority(c, 0.0, v) == -(2 ** 62)
    assert isinstance(Lead((2.6, 0.0)).priority(c, 0.0, v), int)


# ------------------------------------------------------------------ lpm
def test_lpm_longest_cached_prefix_first_ties_in_arrival_order():
    s = LPMScheduler()
    calls = [(info(1), 0.0), (info(2), 1.0), (info(3), 2.0), (info(4), 3.0)]
    v = View(now=3.0, cached={1: 0, 2: 3, 3: 1, 4: 3})
    assert order(s, calls, v) == [2, 4, 3, 1]
    assert [s.priority(c, a, v) for c, a in calls] == [0, -3, -1, -3]
    # the key follows the cache state the view reports at each admission
    v.cached = {1: 5}
    assert order(s, calls, v)[0] == 1


def test_lpm_aging_beats_a_longer_prefix():
    s = LPMScheduler(max_wait_s=1.0)
    calls = [(info(1), 0.0), (info(2), 0.5)]
    v = View(now=0.9, cached={2: 9})
    assert order(s, calls, v) == [2, 1]
    v.now = 1.01         # rid 1 has now waited > 1 s, rid 2 has not
    assert order(s, calls, v) == [1, 2]


# ------------------------------------------------------------------ attained service and las
def test_prefill_work_counts_uncached_tokens_at_least_one():
    c = info(1, n_in=4 * BS + 3)
    assert prefill_work(c, 0, 0) == 4 * BS + 3
    assert prefill_work(c, 2, 1) == BS + 3
    assert prefill_work(c, 4, 0) == 3
    assert prefill_work(info(2, n_in=2 * BS), 2, 0) == 1     # a full hit still computes a token


def test_attained_service_per_workflow_and_dropped_at_the_end():
    svc = AttainedService()
    a0, a1 = info(1, wf="a", n_in=3 * BS, n_out=7), info(2, wf="a", n_in=5 * BS, n_out=2, index=1)
    b0 = info(3, wf="b", n_in=2 * BS, n_out=1)
    other_tenant = info(4, wf="a", tenant="u", n_in=BS, n_out=1)
    svc.observe(admitted(a0))
    svc.observe(finished(a0))
    svc.observe(admitted(a1, gpu_hit=3))
    assert svc.of(a1) == 3 * BS + 7 + 2 * BS
    svc.observe(admitted(b0))
    svc.observe(admitted(other_tenant))
    assert svc.of(b0) == 2 * BS and svc.of(other_tenant) == BS     # (tenant, workflow) keys
    # warm-ups count for nobody; a resumed call's re-admission is not counted again
    svc.observe(admitted(info(9, wf="a", warmup=True)))
    svc.observe(finished(info(9, wf="a", warmup=True)))
    a1.extra["resumed"] = 1
    svc.observe(admitted(a1))
    assert svc.of(a1) == 3 * BS + 7 + 2 * BS
    svc.observe(finished(a1))
    total = 3 * BS + 7 + 2 * BS + 2
    svc.observe(ev.WorkflowEnded(1.0, "a", "t"))
    assert svc.ended == (("t", "a"), total)
    assert svc.of(a0) == 0 and ("t", "a") not in svc.work
    assert svc.of(other_tenant) == BS
    svc.observe(ev.WorkflowEnded(2.0, "never-seen", "t"))
    assert svc.ended is None


def test_las_least_attained_workflow_first_ties_in_arrival_order():
    s = LASScheduler()
    assert s.wants_events
    a0 = info(1, wf="a", n_in=10 * BS, n_out=50)
    b0 = info(2, wf="b", n_in=2 * BS, n_out=5)
    for e in (ev.CallArrived(0, a0), ev.CallArrived(0, b0), admitted(a0), admitted(b0),
              finished(b0), finished(a0)):
        s.observe(e)
    a1 = info(3, wf="a", index=1)
    b1 = info(4, wf="b", index=1)
    c0 = info(5, wf="c")
    d0 = info(6, wf="d")
    calls = [(a1, 1.0), (b1, 2.0), (c0, 3.0), (d0, 2.5)]
    v = View(now=3.0)
    # c and d have attained nothing (d arrived first), b 37 tokens, a 210
    assert order(s, calls, v) == [6, 5, 4, 3]
    assert [s.priority(c, a, v) for c, a in calls] == [10 * BS + 50, 2 * BS + 5, 0, 0]
    # a's workflow ends: its entry is dropped, a new call of a workflow called "a" starts from 0
    s.observe(ev.WorkflowEnded(4.0, "a", "t"))
    assert s.key(a1, 1.0, v) == (0, 1.0)
    assert s.state_bytes() > 0


def test_las_reorders_only_on_events():
    s = LASScheduler()
    a, b = info(1, wf="a"), info(2, wf="b")
    calls = [(a, 0.0), (b, 1.0)]
    v = View(now=1.0)
    assert order(s, calls, v) == [1, 2]
    s.observe(admitted(info(7, wf="a", n_in=2 * BS)))       # an earlier call of a was admitted
    assert order(s, calls, v) == [2, 1]
    v.now = 50.0         # time alone changes nothing (below max_wait_s)
    assert order(s, calls, v) == [2, 1]
    v.now = 61.0         # a waited 61 s > 60 s
    assert order(s, calls, v) == [1, 2]

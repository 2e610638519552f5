"""A call whose next blocks are being computed waits for them (`sched/inflight.py`, the `agent`
scheduler's hold): the prompt set fed by events, the scheduler's decision, and the simulator,
where a fan-out's parallel instances then compute their shared prompt once."""

from __future__ import annotations

import pytest

from agentrt.runtime import events as ev
from agentrt.sched.agent import AgentScheduler
from agentrt.sched.base import Scheduler
from agentrt.sched.inflight import InflightPrefixes
from sched_fakes import BS, View, info
from test_sched_admission import call, finish, sim_of


def admitted(c: ev.CallInfo, now: float = 0.0) -> ev.CallAdmitted:
    return ev.CallAdmitted(now, c, None, 0, 0)


def test_a_prompt_counts_from_admission_until_it_is_cached():
    s = InflightPrefixes()
    first, sibling = info(1, ids=[1, 2, 3, 4]), info(2, ids=[1, 2, 3, 9])
    assert not s.computing_next(sibling, 0)
    s.observe(admitted(first))
    assert len(s) == 1
    assert s.computing_next(sibling, 0) and s.computing_next(sibling, 2)
    assert not s.computing_next(sibling, 3)          # its block 3 (id 9) is nobody's
    assert not s.computing_next(info(3, ids=[7, 8]), 0)
    assert not s.computing_next(info(4, tenant="other", ids=[1, 2]), 0)   # tenants never share
    s.observe(ev.PromptCached(1.0, first, None, 4))
    assert len(s) == 0 and not s.computing_next(sibling, 0)


def test_two_prompts_sharing_blocks_and_a_call_that_never_caches():
    s = InflightPrefixes()
    a, b = info(1, ids=[1, 2, 3]), info(2, ids=[1, 2, 5])
    s.observe(admitted(a))
    s.observe(admitted(b))
    s.observe(admitted(b))                           # seen once
    s.observe(ev.CallFinished(1.0, a, None))         # a left without caching (oversize, failed)
    assert s.computing_next(info(3, ids=[1, 2, 5, 6]), 2)
    assert not s.computing_next(info(3, ids=[1, 2, 3]), 2)
    s.observe(ev.PromptCached(2.0, b, None, 3))
    assert len(s) == 0 and s._ids == {}


def test_warmups_and_prompts_without_a_full_block_are_not_counted():
    s = InflightPrefixes()
    s.observe(admitted(info(1, ids=[1, 2], warmup=True)))
    s.observe(admitted(info(2, n_in=BS - 1, ids=[1])))
    assert len(s) == 0 and not s.computing_next(info(3, ids=[1, 2]), 0)


def test_the_agent_scheduler_holds_a_sibling_until_the_prompt_is_cached():
    sched = AgentScheduler(max_wait_s=10.0)
    first, sibling = info(1, ids=[1, 2, 3, 4]), info(2, ids=[1, 2, 3, 4])
    for c in (first, sibling):
        sched.observe(ev.CallArrived(0.0, c))
    sched.observe(admitted(first))
    assert sched.defer(sibling, 0.0, View(now=0.5)) and sched.wakes_on_prefill()
    assert sched.held_until(sibling, 0.0) == 10.0          # asked again by its own bound at the latest
    assert not sched.defer(sibling, 0.0, View(now=10.5))          # held past max_wait_s: goes
    assert not sched.wakes_on_prefill()
    assert sched.defer(sibling, 0.0, View(now=0.6))
    sched.observe(ev.PromptCached(0.7, first, None, 4))
    assert not sched.defer(sibling, 0.0, View(now=0.7, cached={2: 4}))
    assert not AgentScheduler(prefix_hold=False).defer(sibling, 0.0, View(now=0.5))


def fan_out(n_children: int = 3, shared: int = 40) -> list:
    """A parent call, then `n_children` parallel instances of one agent with the same prompt
    (forked from one history: the parent's 8 blocks and `shared` more), then a join."""
    parent = list(range(1, 9))
    fork = parent + list(range(100, 100 + shared))
    calls = [call("w", 0, parent, ts=0, last=False, agent="lead")]
    calls += [call("w", 1 + k, fork, after=(0,), last=False, agent="worker") for k in range(n_children)]
    calls.append(call("w", 1 + n_children, fork + [500 + k for k in range(4)],
                      after=tuple(range(1, 1 + n_children)), agent="lead"))
    return calls


def test_parallel_instances_compute_their_prompt_once_under_the_agent_scheduler():
    calls = fan_out()
    fcfs = finish(sim_of(calls, 2000), len(calls))
    held = finish(sim_of(calls, 2000, scheduler=AgentScheduler()), len(calls))
    unheld = finish(sim_of(calls, 2000, scheduler=AgentScheduler(prefix_hold=False)), len(calls))
    # FCFS admits the three together: each computes the 40 shared blocks (each hits the parent's
    # 8); with the hold the second and third wait for the first's prompt and hit all of it but
    # the last token, which an engine always computes
    assert held.gpu_hit_tokens - fcfs.gpu_hit_tokens == 2 * (40 * BS - 1)
    assert unheld.gpu_hit_tokens == fcfs.gpu_hit_tokens
    assert held.prefill_tokens < fcfs.prefill_tokens


class AlwaysHold(Scheduler):
    """Holds every call for as long as the engine lets it."""
    defers = True

    def defer(self, call, arrival, view) -> bool:
        return True


def test_a_call_held_to_its_bound_goes_when_the_engine_parks_until_it():
    # nothing else runs, so the engine parks until the hold's bound and lands exactly on it; it
    # used to hold the call again there, parked until the same instant, and never moved the clock
    sim = sim_of([call("w", 0, [1, 2, 3], ts=0)], 100, scheduler=AlwaysHold(max_hold_s=5.0))
    step, steps = sim.step, [0]

    def counted():
        steps[0] += 1
        assert steps[0] < 10_000, f"the clock is stuck at {sim.now}"
        return step()
    sim.step = counted
    m = finish(sim, 1)
    assert m.queue_wait[0] == pytest.approx(5.0)

"""`OvercommitCost`: when the `agent` scheduler holds a new workflow that would over-commit the
pool, against hand-computed costs, and the hold it drives in `AgentScheduler.defer` and in a
simulated replay."""

from __future__ import annotations

import pytest

from agentrt import api
from agentrt.runtime import events as ev
from agentrt.sched.agent import AgentScheduler
from agentrt.sched.overcommit import OvercommitCost

from sched_fakes import BS, View, info  # noqa: E402

CLS = ("t", "planner")


def learned(gap_s=10.0, contexts=(100,), cls=CLS):
    """A cost model that saw one workflow call every `gap_s` and others end with `contexts`."""
    c = OvercommitCost(window=8)
    c.arrived(("t", "w0"), 0.0)
    c.arrived(("t", "w0"), gap_s)
    for i, blocks in enumerate(contexts):
        c.ended(("t", f"done{i}"), cls, blocks)
    return c


def test_nothing_learned_holds_as_the_working_set_rule_does():
    c = OvercommitCost()
    assert c.worth_holding(CLS, 5, 100, 50, BS, View(requests=1))
    c.arrived(("t", "w"), 1.0)                    # one call: still no cycle
    assert c.worth_holding(CLS, 5, 100, 50, BS, View(requests=1))


def test_the_cost_is_recompute_per_cycle_times_the_requests_it_delays():
    c = learned(gap_s=10.0, contexts=(100,))
    # 40 live + 100 expected - 60 free: 80 blocks over, 1,280 tokens a cycle of 10 s
    per_token = 10.0 / (80 * BS)                  # a cycle's recompute takes exactly one cycle
    assert c.worth_holding(CLS, 5, 40, 60, BS, View(requests=1, prefill_s_per_token=per_token))
    assert not c.worth_holding(CLS, 5, 40, 60, BS, View(requests=1, prefill_s_per_token=per_token * 0.99))
    # the same recompute at a tenth of the cycle is worth it only with ten requests delayed
    assert not c.worth_holding(CLS, 5, 40, 60, BS, View(requests=9, prefill_s_per_token=per_token / 10))
    assert c.worth_holding(CLS, 5, 40, 60, BS, View(requests=10, prefill_s_per_token=per_token / 10))


def test_over_commit_is_at_most_the_new_context_and_uses_the_class_mean():
    c = learned(contexts=(100, 300))
    assert c.expected_context(CLS, 5) == 200
    assert c.expected_context(CLS, 500) == 500        # never less than what it brings now
    assert c.expected_context(("t", "other"), 7) == 7  # an unseen class: its first call
    seen = []

    class Spy(View):
        def prefill_seconds(self, tokens):
            seen.append(tokens)
            return 0.0
    c.worth_holding(CLS, 5, 10_000, 100, BS, Spy())     # far over: only its own 200 blocks count
    c.worth_holding(CLS, 5, 50, 100, BS, Spy())         # 150 over
    assert seen == [200 * BS, 150 * BS]
    assert not c.worth_holding(CLS, 5, 50, 250, BS, View(prefill_s_per_token=1e9))   # it fits


def test_state_is_bounded_and_released():
    c = OvercommitCost(window=4, max_classes=2)
    for i in range(5):
        c.ended(("t", f"w{i}"), ("t", f"a{i}"), 10)
    assert len(c.contexts) == 2
    c.arrived(("t", "live"), 0.0)
    assert ("t", "live") in c.last_arrival
    c.ended(("t", "live"), None, 0)
    assert ("t", "live") not in c.last_arrival
    for i in range(10):
        c.arrived(("t", "x"), float(i))
    assert len(c.gaps) == 4


def feed_live_workflow(s, wf, n_blocks, now):
    """A live workflow whose context of `n_blocks` is cached (a chain of blocks)."""
    from agentrt.cache.block import GPU, Block
    root = Block(-1, None, GPU, "t")
    b = root
    for i in range(n_blocks):
        b = Block(i, b, GPU, "t")
    c = info(900, wf=wf, agent="planner")
    s.observe(ev.CallArrived(now, c))
    s.observe(ev.PromptCached(now, c, b, n_blocks))
    return c


def test_defer_admits_a_cheap_over_commit_and_holds_a_costly_one():
    s = AgentScheduler()
    feed_live_workflow(s, "live", 40, 0.0)
    s.observe(ev.CallArrived(10.0, info(7, wf="live", agent="planner", index=1)))   # a 10 s cycle
    new = info(1, wf="new", agent="planner", n_in=8 * BS, n_out=0)
    s.observe(ev.CallArrived(10.0, new))
    # 40 live + 9 own blocks in a pool of 45: 4 over
    cheap = View(now=10.0, capacity_blocks=45, requests=2, prefill_s_per_token=1e-4)
    costly = View(now=10.0, capacity_blocks=45, requests=2, prefill_s_per_token=1.0)
    assert not s.defer(new, 10.0, cheap)
    assert s.defer(new, 10.0, costly)
    roomy = View(now=10.0, capacity_blocks=1000, requests=2, prefill_s_per_token=1.0)
    assert not s.defer(new, 10.0, roomy)               # it fits: no question of cost
    live_call = info(8, wf="live", agent="planner", index=2)
    assert not s.defer(live_call, 10.0, costly)         # live workflows are never held


@pytest.mark.parametrize("gpu_blocks", [400, 1200])
def test_a_replay_with_the_hold_finishes_every_workflow(gpu_blocks):
    r = api.simulate("mix", ["lru"], scheduler="agent", workflows=24, concurrency=8,
                     gpu_blocks=gpu_blocks).records()[0]
    assert r["workflows"] == 24 and r["calls"] > 24
    assert r["wait_max_s"] <= AgentScheduler().max_hold_s + 60.0

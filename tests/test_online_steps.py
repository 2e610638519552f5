"""Online K-step agent forecasts (`policies/pbkv/online_steps.py`) and PBKV-TA's use of them."""

import numpy as np
import pytest

from agentrt.policies.pbkv import PBKVTimePolicy
from agentrt.policies.pbkv.online_steps import OnlineSteps
from agentrt.policies.transitions import END, TransitionLearner
from agentrt.runtime import events as ev

from conftest import FixedPredictor as Fixed
from test_policy_pbkv_time import call, setup


def test_k_step_rows_are_the_learned_chain_propagated():
    s = OnlineSteps(horizon=3)
    for _ in range(3):                      # a -> b -> a -> END, three times
        s.observe("t", "a", "b")
        s.observe("t", "b", "a")
        s.observe("t", "a", END)
    index, rows = s.rows("t", "a")
    assert list(index) == ["b", "a"]        # the agents reachable from a, first reached first
    np.testing.assert_allclose(rows[0], [0.5, 0.0])
    np.testing.assert_allclose(rows[1], [0.0, 0.5])           # b then a
    np.testing.assert_allclose(rows[2], [0.25, 0.0])
    assert s.rows("t", "unknown") is None
    assert s.rows("other tenant", "a") is None                  # tenants learn apart


def test_an_agent_with_no_successor_yet_ends_the_forecast():
    s = OnlineSteps(horizon=2)
    s.observe("t", "a", "b")                # b was never followed by anything
    index, rows = s.rows("t", "a")
    assert index == {"b": 0}
    np.testing.assert_allclose(rows, [[1.0], [0.0]])
    assert s.rows("t", "b") is None


def test_rows_are_recomputed_only_after_learning():
    s = OnlineSteps(horizon=2)
    s.observe("t", "a", "b")
    first = s.rows("t", "a")
    assert s.rows("t", "a") is first
    s.observe("t", "a", "a")
    index, rows = s.rows("t", "a")
    assert index == {"b": 0, "a": 1}
    np.testing.assert_allclose(rows[0], [0.5, 0.5])


def test_cost_does_not_grow_with_unrelated_agents():
    """A trace without identity names an agent per system prompt: one-call workflows teach
    thousands of agents that only end. A forecast keeps only what its agent reaches."""
    s = OnlineSteps(horizon=4)
    for i in range(5000):
        s.observe("t", f"anchor:{i}", END)
    s.observe("t", "a", "b")
    index, rows = s.rows("t", "a")
    assert index == {"b": 0} and rows.shape == (4, 1)
    index, rows = s.rows("t", "anchor:4999")
    assert index == {} and rows.shape == (4, 0)


def test_the_learner_keeps_at_most_max_sources_agents_least_recent_dropped_first():
    t = TransitionLearner(window=4, max_sources=3)
    for a in ("a", "b", "c"):
        t.observe(a, END)
    t.observe("a", "b")                     # a is the most recent now
    t.observe("d", END)                     # a fourth source: b, the least recent, goes
    assert t.sources() == 3 and t.dropped_sources == 1
    assert t.next_probs("b") == {}
    assert t.next_probs("a") == {END: 0.5, "b": 0.5}
    with pytest.raises(ValueError, match="max_sources"):
        TransitionLearner(max_sources=0)


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError, match="horizon"):
        OnlineSteps(horizon=0)
    with pytest.raises(ValueError, match="window"):
        OnlineSteps(horizon=2, window=0)


def _teach(rt, cache):
    """Two finished workflows teach: after `a` comes `b`, after `b` the workflow ends."""
    for i, t in enumerate((0.0, 10.0)):
        w = f"h{i}"
        call(rt, cache, w, "a", [900 + 10 * i], t, t + 1.0)
        call(rt, cache, w, "b", [901 + 10 * i], t + 2.0, t + 3.0)
        rt.observe(ev.WorkflowEnded(t + 3.0, w, "default"))


def test_without_a_predictor_pbkv_ta_forecasts_online():
    """A live workflow at `a`: its `b` thread is due next, its `a` thread is not (the learned
    chain is a -> b -> END). Online, PBKV-TA values `b`'s thread above `a`'s; without the
    online model (and no predictor) both are worth nothing."""
    values = {}
    for online in (False, True):
        p = PBKVTimePolicy(online=online)
        rt, cache = setup(p)
        _teach(rt, cache)
        call(rt, cache, "live", "b", [1], 20.0, 21.0)
        call(rt, cache, "live", "a", [2], 22.0, 23.0)
        p.score(next(iter(cache.peek_victims(1))))     # refresh
        wf = rt.workflows[("default", "live")]
        values[online] = (wf.threads["a"].value, wf.threads["b"].value)
    assert values[False] == (0.0, 0.0)
    a, b = values[True]
    assert b > a >= 0.0 and b > 0.0


def test_with_a_predictor_that_knows_the_agent_the_online_model_changes_nothing():
    out = {}
    for online in (False, True):
        p = PBKVTimePolicy(predictor=Fixed(["a", "b"], [0.5, 0.3]), online=online)
        rt, cache = setup(p)
        _teach(rt, cache)
        call(rt, cache, "live", "a", [1], 20.0, 21.0)
        out[online] = [b.hash for b in cache.peek_victims(6)]
        p.score(next(iter(cache.peek_victims(1))))
        out[online].append(rt.workflows[("default", "live")].threads["a"].value)
    assert out[False] == out[True]


def test_an_agent_the_predictor_never_saw_is_forecast_online():
    """The predictor knows only `x`; the live workflow's current agent `a` it never saw. Online,
    the `b` thread (due next) gets a value; without the online model it gets none."""
    values = {}
    for online in (False, True):
        p = PBKVTimePolicy(predictor=Fixed(["x"], [0.9]), online=online)
        rt, cache = setup(p)
        _teach(rt, cache)
        call(rt, cache, "live", "b", [1], 20.0, 21.0)
        call(rt, cache, "live", "a", [2], 22.0, 23.0)
        p.score(next(iter(cache.peek_victims(1))))
        values[online] = rt.workflows[("default", "live")].threads["b"].value
    assert values[False] == 0.0
    assert values[True] > 0.0


@pytest.mark.slow
def test_untrained_pbkv_ta_beats_lifecycle_eviction_on_gaia_through_the_api():
    """End to end: no training split (as behind a live engine started without a predictor).
    Online forecasts lift PBKV-TA clearly above what it was without them (PBKV-LAE with anchors)."""
    import agentrt
    run = dict(workflows=40, concurrency=8, gpu_blocks=4634, train_fraction=0)
    online = agentrt.simulate("gaia", "pbkv-lae,pbkv-ta", **run).doc["results"]
    off = agentrt.simulate("gaia", "pbkv-ta", policy_options={"pbkv-ta": {"online": False}},
                           **run).doc["results"]
    assert online["pbkv-ta"]["hit_rate"] > off["pbkv-ta"]["hit_rate"] + 0.03
    assert online["pbkv-ta"]["hit_rate"] > online["pbkv-lae"]["hit_rate"] + 0.03

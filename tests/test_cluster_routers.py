"""The router contract, over every router, and each baseline's own rule, on fake replica views."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest
import typer
from typer.testing import CliRunner

from agentrt.cluster.agent import AgentRouter, rendezvous_order
from agentrt.commands.routers import register_commands
from agentrt.cluster.registry import make_router, router_names
from agentrt.cluster.routing import ClusterHints, ReplicaView, RouteRequest, Router
from agentrt.errors import AgentrtError
from agentrt.trace.chain import shared_blocks


@dataclass
class FakeView:
    """A replica: resident chains as a set of hash ids (a cached prefix is contiguous)."""
    ids: set = field(default_factory=set)
    running: int = 0
    waiting: int = 0
    queued_tokens: int = 0
    free_blocks: int = 100
    capacity_blocks: int = 1000
    evicted_blocks: int = 0

    def cached_blocks(self, tenant: str, hash_ids: Sequence[int]) -> int:
        n = 0
        for h in hash_ids:
            if h not in self.ids:
                break
            n += 1
        return n


def req(wf: str, agent: str = "a", chain=(1, 2, 3, 4), call: int = 0) -> RouteRequest:
    return RouteRequest(tenant="t", workflow=wf, agent=agent, hash_ids=list(chain),
                        prompt_tokens=16 * len(chain), output_tokens=16, call_index=call)


def bound(name: str, **opts) -> Router:
    r = make_router(name, **opts)
    r.bind(ClusterHints(block_size=16))
    return r


def test_registry_names_and_errors():
    assert router_names() == ["round-robin", "least-loaded", "prefix", "session", "agent"]
    with pytest.raises(AgentrtError, match="unknown router 'nope'"):
        make_router("nope")
    with pytest.raises(AgentrtError, match="bad option for router 'prefix'"):
        make_router("prefix", imbalance_rel=0.5)


def test_fake_view_is_a_replica_view():
    assert isinstance(FakeView(), ReplicaView)


@pytest.mark.parametrize("name", router_names())
def test_contract_valid_index_and_rank(name):
    r = bound(name)
    for n in (1, 2, 5, 16):
        views = [FakeView(ids={1, 2} if i % 3 == 0 else set(), running=i % 4, waiting=i % 2,
                          queued_tokens=100 * (i % 5)) for i in range(n)]
        for k in range(20):
            q = req(f"w{k % 7}", agent=f"a{k % 3}", call=k)
            i = r.route(q, views, float(k))
            assert 0 <= i < n
            r.on_routed(q, i, float(k))
            views[i].ids.update(q.hash_ids)
            r.on_finished(q, i, float(k) + 0.5)
            ranked = r.rank(q, views, float(k) + 0.5)
            assert sorted(ranked) == list(range(n))
        for k in range(7):
            r.on_workflow_end(f"w{k}", "t", 100.0)
        assert r.state_size() >= 0


def test_round_robin_cycles():
    r = bound("round-robin")
    views = [FakeView() for _ in range(3)]
    assert [r.route(req("w"), views, 0.0) for _ in range(6)] == [0, 1, 2, 0, 1, 2]


def test_least_loaded_picks_fewest_requests_and_rotates_ties():
    r = bound("least-loaded")
    views = [FakeView(running=3), FakeView(running=1, waiting=1), FakeView(running=1)]
    assert r.route(req("w"), views, 0.0) == 2
    views = [FakeView() for _ in range(3)]
    assert {r.route(req("w"), views, 0.0) for _ in range(3)} == {0, 1, 2}


def test_prefix_longest_match_when_balanced_least_loaded_when_not():
    r = bound("prefix")
    views = [FakeView(ids={1}, running=2), FakeView(ids={1, 2, 3}, running=3), FakeView(running=1)]
    assert r.route(req("w"), views, 0.0) == 1
    views[1].running = 40           # imbalanced: 40 - 1 > 10 and 40 > 1.5 x 1
    assert r.route(req("w"), views, 0.0) == 2
    views[1].running = 3
    assert r.route(req("x", chain=(9, 8, 7)), views, 0.0) == 2     # no match: least loaded


def test_prefix_ties_go_to_the_less_loaded():
    r = bound("prefix")
    views = [FakeView(ids={1, 2}, running=5), FakeView(ids={1, 2}, running=2)]
    assert r.route(req("w"), views, 0.0) == 1


def test_session_is_sticky_and_forgets_ended_workflows():
    r = bound("session")
    views = [FakeView(running=5), FakeView(running=0), FakeView(running=2)]
    i = r.route(req("w"), views, 0.0)
    assert i == 1
    r.on_routed(req("w"), i, 0.0)
    views[1].running = 50
    for k in range(5):              # stays, whatever the load
        assert r.route(req("w", call=k), views, 1.0 + k) == 1
    r.on_workflow_end("w", "t", 10.0)
    assert r.state_size() == 0
    assert r.route(req("w"), views, 11.0) == 2


@pytest.mark.parametrize("name", ["session", "agent"])
def test_router_state_is_bounded(name):
    r = bound(name, max_workflows=50)
    views = [FakeView() for _ in range(4)]
    for k in range(1000):
        q = req(f"w{k}", agent=f"a{k % 5}", chain=(k, k + 1))
        i = r.route(q, views, float(k))
        r.on_routed(q, i, float(k))
        r.on_finished(q, i, float(k))
    assert r.state_size() <= 50 + 2 * 5 + 5
    # silent workflows age out without any end event
    q = req("late", chain=(1,))
    r.on_routed(q, 0, 10_000.0)
    assert r.state_size() <= 1 + 2 * 5 + 5


def test_agent_follows_the_workflow_context():
    r = bound("agent")
    views = [FakeView(ids={1, 2}), FakeView(ids={1, 2, 3, 4, 5, 6}), FakeView(ids={1, 2})]
    q = req("w", chain=(1, 2, 3, 4, 5, 6, 7))
    assert r.route(q, views, 0.0) == 1          # the longest resident prefix, equal loads
    r.on_routed(q, 1, 0.0)
    r.on_finished(q, 1, 0.1)
    views[1].queued_tokens = 100                # busier by less than twice its cached prefill: stays
    assert r.route(req("w", chain=(1, 2, 3, 4, 5, 6, 7, 8), call=1), views, 1.0) == 1


def test_agent_leaves_an_overloaded_home():
    r = bound("agent")
    views = [FakeView(ids={1, 2, 3, 4}), FakeView(), FakeView()]
    q = req("w")
    r.on_routed(q, 0, 0.0)
    r.on_finished(q, 0, 0.1)
    views[0].queued_tokens = 500_000            # many seconds of prefill queued at home
    assert r.route(req("w", call=1), views, 1.0) != 0


def test_agent_keeps_parallel_instances_with_the_one_computing_their_prefix():
    r = bound("agent")
    views = [FakeView(), FakeView(), FakeView()]
    fork = (1, 2, 3, 4, 5, 6)                   # instances forked from one history: one chain
    first = req("w", agent="worker", chain=fork)
    home = r.route(first, views, 0.0)
    r.on_routed(first, home, 0.0)
    views[home].queued_tokens = 500_000         # its prefill queued there, nothing cached yet
    second = req("w", agent="worker", chain=fork + (9,), call=1)
    assert r.route(second, views, 0.0) == home  # joins it rather than recompute the prefix
    r.on_routed(second, home, 0.0)
    r.on_finished(first, home, 1.0)             # one still in flight: still a parallel instance
    assert r.route(req("w", agent="worker", chain=fork, call=2), views, 1.0) == home
    r.on_finished(second, home, 1.0)            # none in flight: the usual rules, home is loaded
    assert r.route(req("w", agent="worker", chain=fork, call=3), views, 2.0) != home


def test_agent_instances_sharing_only_the_anchor_are_placed_apart():
    r = bound("agent")
    views = [FakeView(ids={1, 2}), FakeView(ids={1, 2}), FakeView(ids={1, 2})]
    for k, wf in enumerate(("w1", "w2")):       # two workflows confirm the anchor (1, 2)
        q = req(wf, agent="worker", chain=(1, 2, 10 + k))
        r.on_routed(q, 2, 0.0)
        r.on_finished(q, 2, 0.1)
    first = req("w", agent="worker", chain=(1, 2, 3, 4))
    r.on_routed(first, 0, 1.0)
    views[0].queued_tokens = 500_000
    other = req("w", agent="worker", chain=(1, 2, 7, 8), call=1)   # a different task, same agent
    assert r.route(other, views, 1.0) != 0


def test_shared_blocks_of_chained_prompts():
    assert shared_blocks([1, 2, 3, 4], [1, 2, 3, 9], 10) == 3
    assert shared_blocks([1, 2, 3], [1, 2, 3, 4], 10) == 3
    assert shared_blocks([1, 2, 3], [1, 2, 3], 2) == 2       # only full blocks count
    assert shared_blocks([5], [1], 10) == 0 and shared_blocks([], [1], 10) == 0


def test_agent_places_by_load_when_nothing_is_cached():
    r = bound("agent")
    views = [FakeView(queued_tokens=9000), FakeView(queued_tokens=100), FakeView(queued_tokens=5000)]
    assert r.route(req("w"), views, 0.0) == 1


def test_agent_infers_an_agent_without_identity():
    r = bound("agent")
    q = RouteRequest(tenant="t", workflow="w", agent=None, hash_ids=list(range(40)), prompt_tokens=640)
    assert r._agent(q).startswith("anchor:")
    assert 0 <= r.route(q, [FakeView(), FakeView()], 0.0) < 2


def test_agent_routes_a_one_call_workflow_as_prefix_does():
    """A call that is its workflow's first and last (a Mooncake line, a request naming no
    workflow) has no context coming back: the longest cached prefix wins over a shorter queue
    unless the load is imbalanced, as under `prefix`; with `one_call_prefix=False` the cost model
    moves it to the idle replica."""
    def views():
        return [FakeView(), FakeView(ids={1, 2, 3, 4}, running=3, queued_tokens=200_000), FakeView()]
    one = RouteRequest(tenant="t", workflow="~1", agent=None, hash_ids=[1, 2, 3, 4, 5, 6],
                       prompt_tokens=96, call_index=0, last=True)
    assert bound("agent").route(one, views(), 0.0) == bound("prefix").route(one, views(), 0.0) == 1
    assert bound("agent", one_call_prefix=False).route(one, views(), 0.0) != 1
    first = RouteRequest(tenant="t", workflow="w", agent="a", hash_ids=[1, 2, 3, 4, 5, 6],
                         prompt_tokens=96, call_index=0, last=False)     # more calls follow
    assert bound("agent").route(first, views(), 0.0) != 1


def test_rendezvous_order_is_stable_and_a_permutation():
    a = rendezvous_order("t", "coder", 8)
    assert sorted(a) == list(range(8)) and a == rendezvous_order("t", "coder", 8)
    assert rendezvous_order("t", "coder", 9)[:3] != [] and isinstance(AgentRouter(), Router)


def test_routers_command_lists_names_one_per_line():
    app = typer.Typer()
    register_commands(app)

    @app.command()
    def other() -> None:            # a second command, so typer keeps `routers` as a subcommand
        pass

    out = CliRunner().invoke(app, ["routers"])
    assert out.exit_code == 0
    names = [line.split()[0] for line in out.output.splitlines() if line.strip()]
    assert names == router_names()

"""The Ray router's bookkeeping under failure and at scale (found by a review, each confirmed with
fake replicas): a call vLLM refused leaves no phantom cache, expired provisional blocks leave in
O(expired), the queue estimate keeps running totals, an empty slot does not turn the prefix
router into least-loaded, and the unauthenticated stats endpoint shows no workflow or address."""

from __future__ import annotations

import asyncio


from agentrt.cluster.baselines import PrefixRouter
from agentrt.ray.blocks import chain
from agentrt.ray.replica_state import ReplicaState
from test_ray_router import BS, FakeReplica, agent_call, make_router, requires_ray, send


def test_a_call_no_event_confirmed_stops_counting_soon_after_it_finished():
    s = ReplicaState(block_size=BS, capacity=64, events=True, provisional_s=30.0, confirm_grace_s=2.0)
    ids = chain(list(range(40)), BS)
    s.tick(100.0)
    s.note_routed("r1", ids, 40)
    assert s.cached_blocks("default", ids) == 10
    s.tick(101.0)
    s.note_finished("r1")                       # vLLM refused it: no BlockStored ever comes
    s.tick(102.5)
    assert s.cached_blocks("default", ids) == 10   # within the grace: events may still lag
    s.tick(103.5)
    assert s.cached_blocks("default", ids) == 0    # not 30 s of a phantom cache
    # a confirmed call keeps its blocks whatever the grace
    s.note_routed("r2", ids[:3], 12)
    s.resident.update((h, None) for h in ids[:3])
    s.note_finished("r2")
    s.tick(200.0)
    assert s.cached_blocks("default", ids) == 3


def test_expired_provisional_blocks_leave_from_the_front_and_totals_stay_exact():
    s = ReplicaState(block_size=BS, capacity=8, events=True, provisional_s=5.0)
    for i in range(200):
        s.tick(float(i))
        s.note_routed(f"r{i}", [10_000 + i], BS)
    assert len(s.provisional) <= 6                # only the last 5 s of routed blocks remain
    assert s.queued_total == sum(n for n, _, _ in s.inflight.values())
    for i in range(0, 200, 2):
        s.note_finished(f"r{i}")
    assert s.queued_total == sum(n for n, _, _ in s.inflight.values()) and s.running == 100
    oldest = min(t for _, t, _ in s.inflight.values())
    assert s.queued_tokens == max(0, int(s.queued_total - (s.now - oldest) * s.prefill_tokens_per_s))


def test_an_empty_slot_does_not_make_the_prefix_router_ignore_the_cache():
    from agentrt.ray.router import DOWN
    home = ReplicaState(block_size=BS, capacity=64, events=False)
    other = ReplicaState(block_size=BS, capacity=64, events=False)
    ids = chain(list(range(64)), BS)
    home.note_routed("w", ids, 64)
    home.note_finished("w")
    r = PrefixRouter()
    assert not r.imbalanced([home, other, DOWN])
    from agentrt.cluster.routing import RouteRequest
    req = RouteRequest(tenant="default", workflow="w", agent="a", call_index=1, hash_ids=ids,
                       prompt_tokens=64, output_tokens=8)
    assert all(r.route(req, [home, other, DOWN], 0.0) == 0 for _ in range(6))


@requires_ray
def test_the_stats_endpoint_shows_no_workflow_key_nor_replica_address():
    async def run():
        reps = [FakeReplica("a", {"url": "http://10.0.0.7:8000", "kv_events": "tcp://10.0.0.7:5557",
                                  "block_size": BS, "num_blocks": 64, "engine_pid": 42}),
                FakeReplica("b")]
        r = make_router("agent", reps, kv_events=False)
        await send(r, agent_call("acme/merger-talks", list(range(16))))
        text = repr(r.stats())
        assert "merger-talks" not in text and "10.0.0.7" not in text
        assert r.stats()["replicas"][0]["metadata"]["engine_pid"] == 42
    asyncio.run(run())

"""Clairvoyant bounds on a cluster: `oracle` eviction on every replica under one router's
placement, and the pooled bound on any placement.

Model
- A reference run replays the calls behind the router with some eviction policy and records
  which replica served each call, and each replica's admission order (`run_cluster(...,
  record_order=True)`; `agentrt bench --replicas N` takes its run with the most hits).
- The bound replays the same calls pinned to those replicas (`PinnedRouter`); each replica runs
  `OraclePolicy` whose future is the calls pinned to it, on the timeline of that replica's
  admission order. As on one replica, a later pass takes its order from the previous pass, and
  the best pass is kept (`policies.oracle.best_of_passes`).
- Everything else is the cluster simulator's: per-replica memory accounting, running requests'
  blocks, queueing, the shared workflow replay.

What it bounds: the hit rate that any eviction policy could reach on each replica *given the
placement the router made in the reference run*. It is not a bound on routing: a cache-aware
router reads the caches, so under another eviction policy it would place some calls elsewhere,
and a better placement could beat it. The routers' own ceiling (one unbounded cache) bounds
every placement and every policy but ignores memory. `placement_bound` is the sound form of
the cluster oracle: MIN keeping held blocks (`bounds.held`) on each replica's own part of a
run's recorded stream, with one replica's memory each: no eviction policy beats it on that
placement and order (it relaxes what the cluster oracle keeps: running calls' decode blocks,
blocks still being computed).

The pooled bound (`pooled_bound`) is one on routing and eviction together, under memory: MIN
(`bounds.offline.belady_bound`) over the block references a run recorded on all its replicas
(`record_stream=True`, in the order the replicas made them), with N x a replica's GPU blocks. At
every point of that stream the union of the N caches holds at most N x a replica's blocks and
only blocks referenced before, and a call's hit on its replica is a hit on the union: so the
union is one demand-paging cache of the pool and MIN's hits on the same stream bound the run's,
whichever replica each call went to, whichever policy evicted, even with free KV copies between
replicas. Plain MIN drops the memory running requests hold; `belady-held` keeps the blocks the
run's running calls held (`bounds.held`: they were in the union too), the much tighter bound. It
still drops what only separate caches cost (a block helps only calls on its replica; copies of
one prefix on several replicas) and what it bounds is that stream's order and holds: another
router's run orders its calls a little differently (the benchmark bounds each router's own run).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from agentrt.bounds import offline_bound
from agentrt.bounds.held import held_belady_bound
from agentrt.bounds.offline import BoundResult
from agentrt.cluster.metrics import ClusterMetrics, cluster_metrics
from agentrt.cluster.routing import ReplicaView, RouteRequest, Router
from agentrt.cluster.sim import ClusterSimulator
from agentrt.cluster.transfer import PeerTransfer
from agentrt.engine.simulator import EngineConfig
from agentrt.engine.tool_hints import ToolHints
from agentrt.policies.oracle import FutureUses, OraclePolicy, best_of_passes
from agentrt.runtime.policy import Policy
from agentrt.sched.base import Scheduler
from agentrt.trace.schema import Call

Placement = dict[tuple[str, int], int]      # (workflow, call index) -> replica


class PinnedRouter(Router):
    """Sends every call to the replica a recorded placement names."""

    name = "pinned"
    description = "replays a recorded placement (the cluster oracle's reference)"

    def __init__(self, placement: Placement, seed: int = 0) -> None:
        super().__init__(seed)
        self.placement = placement

    def route(self, request: RouteRequest, replicas: Sequence[ReplicaView], now: float) -> int:
        try:
            return self.placement[(request.workflow, request.call_index)]
        except KeyError:
            raise RuntimeError(f"call {request.call_index} of workflow '{request.workflow}' is not in "
                               f"the recorded placement") from None


@dataclass(slots=True)
class ClusterBound:
    reference: ClusterMetrics      # the reference run (the router, the reference policy)
    bound: ClusterMetrics          # the best oracle pass on the reference run's placement
    passes: int                    # oracle passes run


def _split(calls: Sequence[Call], placement: Placement, n: int) -> list[list[Call]]:
    parts: list[list[Call]] = [[] for _ in range(n)]
    for c in calls:
        parts[placement[(c.workflow, c.call)]].append(c)
    return parts


def oracle_on_placement(calls: Sequence[Call], reference: ClusterMetrics, config: EngineConfig,
                        make_scheduler: Callable[[], Scheduler], *, concurrency: int | None = None,
                        time_scale: float = 1.0, seed: int = 0, passes: int = 2,
                        tool_hints: ToolHints | None = None,
                        transfer_gbps: float | None = None) -> tuple[ClusterMetrics, int]:
    """Up to `passes` oracle passes pinned to the placement of `reference` (a run recorded with
    `record_order=True` on the same calls and replay settings); (the best pass, passes run).
    `transfer_gbps`: the replicas copy prefixes from each other as in the reference run; each
    replica's oracle still sees only the calls pinned to it (a reference, not a bound: keeping a
    block for a peer's fetch is invisible to it), and a pass is judged by the prompt tokens it
    did not compute."""
    if reference.placement is None or reference.orders is None:
        raise ValueError("the reference run did not record its placement (record_order=True)")
    placement = reference.placement
    n = len(reference.orders)
    parts = _split(calls, placement, n)
    kw = dict(concurrency=concurrency, time_scale=time_scale, tool_hints=tool_hints, record_order=True,
              transfer=PeerTransfer(transfer_gbps) if transfer_gbps is not None else None)

    def replay(orders: list, i: int):
        futures = iter([FutureUses(parts[j], orders[j], config.block_size) for j in range(n)])
        sim = ClusterSimulator(config, n, PinnedRouter(placement), iter(calls),
                               lambda: OraclePolicy(next(futures), seed=seed), make_scheduler, **kw)
        sim.run()
        saved = sum(s.metrics.gpu_hit_tokens + s.metrics.remote_hit_tokens for s in sim.sims)
        return saved, cluster_metrics(sim), [s.admitted for s in sim.sims]
    best, done = best_of_passes(reference.orders, passes, replay)
    best.router = reference.router
    best.placement = best.orders = None
    return best, done


def run_cluster_oracle(calls: Sequence[Call], n_replicas: int, router: str | Router,
                       config: EngineConfig, make_scheduler: Callable[[], Scheduler], *,
                       reference: Callable[[], Policy], concurrency: int | None = None,
                       time_scale: float = 1.0, seed: int = 0, passes: int = 2,
                       tool_hints: ToolHints | None = None, transfer_gbps: float | None = None) -> ClusterBound:
    """The reference run, then up to `passes` oracle passes pinned to its placement.

    `calls` is read several times (a list). `router` is fresh (a name, or a router not used
    before); `reference` builds the reference run's policy, one per replica.
    """
    from agentrt.cluster.run import run_cluster
    ref = run_cluster(calls, n_replicas, router, config, seed=seed, policy_factory=reference,
                      scheduler_factory=make_scheduler, concurrency=concurrency, time_scale=time_scale,
                      tool_hints=tool_hints, record_order=True, transfer_gbps=transfer_gbps)
    bound, done = oracle_on_placement(calls, ref, config, make_scheduler, concurrency=concurrency,
                                      time_scale=time_scale, seed=seed, passes=passes,
                                      tool_hints=tool_hints, transfer_gbps=transfer_gbps)
    return ClusterBound(ref, bound, done)


def pooled_bound(run: ClusterMetrics, config: EngineConfig, bound: str = "belady") -> BoundResult:
    """An offline bound (`bounds.offline_bound`: `belady`, `belady-held`, `infinite`) over `run`'s
    recorded block stream with all its replicas' GPU blocks as one pool: no placement and no
    eviction policy (demand paging, peer copies free) hits more on that stream. `belady-held`
    keeps the blocks the run's running calls held (`bounds.held`), the tighter bound."""
    if run.stream is None or run.holds is None:
        raise ValueError("the run did not record its block stream (record_stream=True)")
    return offline_bound(bound, run.stream, run.holds, config.block_size,
                         config.gpu_blocks * len(run.replicas))


def placement_bound(run: ClusterMetrics, config: EngineConfig) -> BoundResult:
    """MIN keeping held blocks (`bounds.held`) on each replica's own part of `run`'s stream, with
    one replica's GPU blocks each, summed: no eviction policy hits more on that run's placement
    and order (the cluster oracle approximates this from inside the simulator)."""
    if run.stream is None or run.holds is None or run.stream_at is None or run.holds_at is None:
        raise ValueError("the run did not record its block stream (record_stream=True)")
    n = len(run.replicas)
    streams: list[list] = [[] for _ in range(n)]
    at: list[list[int]] = [[] for _ in range(n)]       # pooled positions of each replica's entries
    for i, (x, r) in enumerate(zip(run.stream, run.stream_at)):
        streams[r].append(x)
        at[r].append(i)
    holds: list[list] = [[] for _ in range(n)]
    for h, r in zip(run.holds, run.holds_at):
        # after the replica's last entry at or before the pooled position (-1: before its first)
        holds[r].append((bisect.bisect_right(at[r], h[0]) - 1,) + tuple(h[1:]))
    prompt = hits = 0
    for r in range(n):
        b = held_belady_bound(streams[r], holds[r], config.block_size, config.gpu_blocks)
        prompt += b.prompt_tokens
        hits += b.hit_tokens
    return BoundResult(prompt, hits)

"""N simulated replicas behind a router, on one shared clock.

Model
- Each replica is the single-replica engine model (`engine.simulator`): its own radix cache, its
  own policy runtime, its own admission scheduler. One `WorkflowReplay` decides when calls arrive
  for the whole cluster: a workflow's later call depends on its predecessors' finishes (closed
  loop), whichever replicas served them.
- Event order: the cluster keeps, per replica, the time it next has to act (`due`: the start of
  its next iteration, or the time it is parked until; none while idle). It repeatedly takes the
  earliest of the next arrival and the earliest `due`; arrivals go first on ties. An arrival is
  routed at its arrival time, after the router has been told of every finish and workflow end up
  to that time; a replica it wakes starts at that time. So replicas advance in lockstep by event
  time, and route times and hook times never go back.
- What a router sees of a replica is its state at its latest iteration boundary: at most one
  iteration ahead of the routing time (the replica stepped past it), as a real router's view
  lags or leads by a scheduling step. A decode stretch (fast-forward) stops where another replica
  may act, so a call routed to a busy replica is taken at the first iteration boundary after its
  arrival, as in the single-replica model.
- A workflow's end is told to every replica that served one of its calls (their runtimes drop it).
- With one replica this is exactly the single-replica simulator (tests check it).
- Optional peer transfer (`transfer.py`): a replica receives cached blocks from another's GPU
  instead of computing them.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Iterator

from agentrt.cluster.replica import Feed, SimReplicaView
from agentrt.engine.tool_hints import ToolHints
from agentrt.cluster.routing import ClusterHints, RouteRequest, Router
from agentrt.cluster.transfer import PeerTransfer, peer_lookup
from agentrt.engine.costs import CostModel
from agentrt.engine.replay import WorkflowReplay
from agentrt.engine.simulator import BLOCKED, PARKED, RAN, EngineConfig, Simulator
from agentrt.runtime.policy import Policy
from agentrt.runtime.runtime import AgentRuntime
from agentrt.sched.base import Scheduler
from agentrt.trace.schema import Call


def cluster_hints(config: EngineConfig, transfer: PeerTransfer | None = None) -> ClusterHints:
    """Prefill speed, decode step time and peer transfer speed of one replica, from the engine's
    cost model and the cluster's link."""
    cost = CostModel(config.preset)
    n = min(config.max_batch_tokens, 4096)
    prefill_s = cost.iteration(n, n * (n + 1) / 2.0, float(n))
    return ClusterHints(block_size=config.block_size, prefill_tokens_per_s=n / prefill_s,
                        decode_s_per_token=cost.iteration(1, 2048.0, 2048.0),
                        transfer_tokens_per_s=transfer.tokens_per_s(cost.kv_bytes_per_token) if transfer else 0.0)


class TaggedRecord:
    """One replica's handle on a cluster-wide record: what it appends goes to the shared list, in
    order, with the replica's index beside it; its length is the shared list's."""

    __slots__ = ("items", "tags", "replica")

    def __init__(self, items: list, tags: list[int], replica: int) -> None:
        self.items, self.tags, self.replica = items, tags, replica

    def append(self, x) -> None:
        self.items.append(x)
        self.tags.append(self.replica)

    def __len__(self) -> int:
        return len(self.items)


class ClusterSimulator:
    def __init__(self, config: EngineConfig, n_replicas: int, router: Router, calls: Iterator[Call],
                 make_policy: Callable[[], Policy | AgentRuntime],
                 make_scheduler: Callable[[], Scheduler] | None = None,
                 concurrency: int | None = None, time_scale: float = 1.0,
                 time_routes: bool = False, tool_hints: ToolHints | None = None,
                 record_order: bool = False, transfer: PeerTransfer | None = None,
                 record_stream: bool = False, safety_net: bool = True) -> None:
        """`record_order`: keep where each call was routed (`placement`) and each replica's
        admission order (`Simulator.admitted`): the cluster oracle's reference (`bounds.py`).
        `record_stream`: keep every replica's block references in one list, in the order the
        replicas made them on the shared clock (`stream`), with when calls held their blocks
        (`holds`) and the replica of each entry (`stream_at`, `holds_at`): the bounds' input
        (`bounds.py`).
        `transfer`: replicas copy cached prefixes from each other (`transfer.py`); None: they do not.
        `safety_net`: each replica's runtime has the LRU safety net (`runtime/safety_net.py`)."""
        if n_replicas < 1:
            raise ValueError(f"n_replicas must be >= 1, got {n_replicas}")
        self.config = config
        self.router = router
        self.replay = WorkflowReplay(calls, concurrency, time_scale)
        self.feeds: list[Feed] = []
        self.sims: list[Simulator] = []
        self.views: list[SimReplicaView] = []
        self.stream: list | None = [] if record_stream else None
        self.holds: list | None = [] if record_stream else None
        self.stream_at: list[int] | None = [] if record_stream else None
        self.holds_at: list[int] | None = [] if record_stream else None
        for i in range(n_replicas):
            feed = Feed(i, self.replay, self._finished)
            sim = Simulator(config, make_policy(), iter(()), arrivals=feed, tool_hints=tool_hints,
                            scheduler=make_scheduler() if make_scheduler is not None else None,
                            safety_net=safety_net)
            feed.sim = sim
            if record_order:
                sim.admitted = []
            if record_stream:
                sim.stream = TaggedRecord(self.stream, self.stream_at, i)
                sim.holds = TaggedRecord(self.holds, self.holds_at, i)
            self.feeds.append(feed)
            self.sims.append(sim)
            self.views.append(SimReplicaView(sim, feed))
        if transfer is not None:
            caches = [s.cache for s in self.sims]
            for i, sim in enumerate(self.sims):
                sim.peers = peer_lookup(caches, i)
                sim.net_bytes_s = transfer.bytes_s
        self.bs = config.block_size
        router.bind(cluster_hints(config, transfer))
        self.due: list[float | None] = [None] * n_replicas
        self.blocked: set[int] = set()
        self.routed = [0] * n_replicas           # calls routed to each replica
        self._hooks: list = []                   # (time, seq, kind, payload): router hooks not yet told
        self._seq = 0
        self._inflight: dict[tuple[str, int], RouteRequest] = {}
        self._served: dict[str, set[int]] = {}   # live workflow -> replicas that served a call of it
        self.time_routes = time_routes
        self.route_s: list[float] = []           # seconds per route() call, when time_routes
        self.wall_seconds = 0.0
        self.placement: dict[tuple[str, int], int] | None = {} if record_order else None

    # ------------------------------------------------------------------ hooks
    def _finished(self, replica: int, c: Call, now: float, ended) -> None:
        req = self._inflight.pop((c.workflow, c.call), None)
        self._push_hook(now, 0, (req, replica))
        if ended is not None:
            self._push_hook(now, 1, (c.workflow, c.tenant))
            for j in self._served.pop(c.workflow, ()):
                if j != replica:
                    self.feeds[j].ended.append((c.workflow, c.tenant))

    def _push_hook(self, t: float, kind: int, payload) -> None:
        self._seq += 1
        heapq.heappush(self._hooks, (t, self._seq, kind, payload))

    def _tell(self, upto: float) -> None:
        hooks = self._hooks
        router = self.router
        while hooks and hooks[0][0] <= upto:
            t, _, kind, payload = heapq.heappop(hooks)
            if kind == 0:
                req, replica = payload
                if req is not None:
                    router.on_finished(req, replica, t)
            else:
                router.on_workflow_end(payload[0], payload[1], t)

    # ------------------------------------------------------------------ routing
    def request_of(self, c: Call) -> RouteRequest:
        n = c.input_length // self.bs
        return RouteRequest(tenant=c.tenant, workflow=c.workflow, agent=c.agent,
                            hash_ids=c.hash_ids[:n] if len(c.hash_ids) > n else c.hash_ids,
                            prompt_tokens=c.input_length, output_tokens=c.output_length,
                            call_index=c.call, last=c.last)

    def _route(self, t: float, c: Call) -> None:
        req = self.request_of(c)
        views = self.views
        if self.time_routes:
            t0 = time.perf_counter()
            i = self.router.route(req, views, t)
            self.route_s.append(time.perf_counter() - t0)
        else:
            i = self.router.route(req, views, t)
        if not 0 <= i < len(views):
            raise RuntimeError(f"router '{self.router.name}' returned replica {i} of {len(views)}")
        self.router.on_routed(req, i, t)
        self._inflight[(c.workflow, c.call)] = req
        self._served.setdefault(c.workflow, set()).add(i)
        if self.placement is not None:
            self.placement[(c.workflow, c.call)] = i
        self.routed[i] += 1
        self.feeds[i].push(t, c)
        views[i].touch()
        sim = self.sims[i]
        d = self.due[i]
        wake = sim.now if sim.now > t else t
        if d is None:
            self.blocked.discard(i)
            self.due[i] = wake
        elif wake < d:          # parked until later: the new call wakes it
            self.due[i] = wake

    # ------------------------------------------------------------------ main loop
    def run(self) -> None:
        t0 = time.perf_counter()
        replay = self.replay
        due = self.due
        sims = self.sims
        n = len(sims)
        for t, c in replay.pop_arrivals(0.0):
            self._route(t, c)
        while True:
            ta = replay.next_arrival()
            i = -1
            d = None
            for j in range(n):
                dj = due[j]
                if dj is not None and (d is None or dj < d):
                    d, i = dj, j
            if ta is not None and (d is None or ta <= d):
                self._tell(ta)
                for t, c in replay.pop_arrivals(ta):
                    self._route(t, c)
                continue
            if d is None:
                break
            sim = sims[i]
            if d > sim.now:
                sim.now = d
            for t, c in replay.pop_arrivals(sim.now):   # moves the shared clock (nothing is due yet)
                self._route(t, c)
            h = None
            for j in range(n):
                dj = due[j]
                if j != i and dj is not None and (h is None or dj < h):
                    h = dj
            sim.horizon = h
            st = sim.step()
            self.views[i].touch()
            if st == RAN:
                due[i] = sim.now
            elif st == PARKED:
                due[i] = sim.next_event_time
            else:
                due[i] = None
                if st == BLOCKED:
                    self.blocked.add(i)
        self._tell(float("inf"))
        if self.blocked:
            raise RuntimeError(f"cluster stalled: replicas {sorted(self.blocked)} hold requests that cannot run")
        self.wall_seconds = time.perf_counter() - t0
        for sim in sims:
            sim.finalize(self.wall_seconds)

"""One replica of a simulated cluster: a `Simulator` fed by its router, seen through a `ReplicaView`.

- `Feed` is the replica's arrival source (it replaces the simulator's own replay): the calls the
  router sent it, in routing order (routing happens in time order), plus the cluster's shared
  `WorkflowReplay` for everything workflow-wide: when the next call may arrive anywhere (a call
  may be routed here at any arrival), and what a finish releases or ends. Finishes are reported
  to the cluster, which tells the router and the other replicas.
- `SimReplicaView` is what a router may read: the GPU-resident prefix of a hash chain (a walk of
  the radix tree), requests running and waiting (routed calls not yet taken count as waiting),
  prefill tokens still to compute, free and total blocks, blocks evicted so far. Load figures are
  computed once per replica state (`touch` marks a change), not once per route.
- A `WorkflowEnded` of a workflow that this replica served but did not finish is delivered at the
  replica's next step, stamped with its own clock (a runtime's time never goes back).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from agentrt.cluster.transfer import resident_depth
from agentrt.engine.replay import WorkflowReplay
from agentrt.engine.request import LOADING, PREFILL
from agentrt.runtime import events as ev
from agentrt.trace.schema import Call

if TYPE_CHECKING:
    from agentrt.engine.simulator import Simulator

FinishHook = Callable[[int, Call, float, object], None]   # (replica, call, now, ended workflow or None)


class Feed:
    """The arrival source of one replica: routed calls, the shared replay for the rest."""

    __slots__ = ("index", "shared", "queue", "ended", "sim", "_on_finish")

    def __init__(self, index: int, shared: WorkflowReplay, on_finish: FinishHook) -> None:
        self.index = index
        self.shared = shared
        self.queue: deque[tuple[float, Call]] = deque()
        self.ended: list[tuple[str, str]] = []      # (workflow, tenant) ended on another replica
        self.sim: Simulator | None = None
        self._on_finish = on_finish

    def push(self, t: float, c: Call) -> None:
        self.queue.append((t, c))

    def pop_arrivals(self, now: float) -> list[tuple[float, Call]]:
        if self.ended:
            sim = self.sim
            if sim.has_observers:
                for wf, tenant in self.ended:
                    sim.observe(ev.WorkflowEnded(sim.now, wf, tenant))
            self.ended.clear()
        q = self.queue
        out = []
        while q and q[0][0] <= now:
            out.append(q.popleft())
        return out

    def next_arrival(self) -> float | None:
        t = self.shared.next_arrival()
        if self.queue and (t is None or self.queue[0][0] < t):
            return self.queue[0][0]
        return t

    def finish(self, c: Call, now: float):
        tool_ms, ended = self.shared.finish(c, now)
        self._on_finish(self.index, c, now, ended)
        return tool_ms, ended

    @property
    def late_arrivals(self) -> int:
        return 0           # counted once, by the shared replay


class SimReplicaView:
    """The `ReplicaView` of a simulated replica (see `cluster.routing`)."""

    __slots__ = ("sim", "feed", "cache", "_load")

    def __init__(self, sim: "Simulator", feed: Feed) -> None:
        self.sim = sim
        self.feed = feed
        self.cache = sim.cache
        self._load: tuple[int, int, int] | None = None

    def touch(self) -> None:
        """The replica stepped or was sent a call: recompute load on the next read."""
        self._load = None

    def cached_blocks(self, tenant: str, hash_ids: Sequence[int]) -> int:
        return resident_depth(self.cache, tenant, hash_ids, len(hash_ids))

    def _loads(self) -> tuple[int, int, int]:
        ld = self._load
        if ld is None:
            sim = self.sim
            tokens = 0
            for r in sim.running:
                if r.state == PREFILL or r.state == LOADING:
                    tokens += r.prefill_left
            for r in sim.waiting:
                tokens += r.prompt_len
            for _, c in self.feed.queue:
                tokens += c.input_length
            ld = self._load = (len(sim.running), len(sim.waiting) + len(self.feed.queue), tokens)
        return ld

    @property
    def running(self) -> int:
        return self._loads()[0]

    @property
    def waiting(self) -> int:
        return self._loads()[1]

    @property
    def queued_tokens(self) -> int:
        return self._loads()[2]

    @property
    def free_blocks(self) -> int:
        return self.cache.free

    @property
    def capacity_blocks(self) -> int:
        return self.cache.gpu_capacity

    @property
    def evicted_blocks(self) -> int:
        return self.cache.evictions

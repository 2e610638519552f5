"""The routers users pick today, as baselines for the agent-aware router.

- `round-robin`: replicas in turn, blind to load and cache.
- `least-loaded`: fewest requests running plus waiting; ties go to the next replica after the
  previous choice (so equal loads rotate instead of piling onto replica 0).
- `prefix`: cache affinity with a load guard, as Ray Serve LLM's `PrefixCacheAffinityRouter`
  and SGLang's cache-aware router do. If the load is imbalanced (max - min > `imbalance_abs`
  and max > `imbalance_rel` x min) route to the least loaded replica; else, if some replica
  holds at least `match_threshold` of the prompt, the one with the longest cached prefix (ties:
  least loaded); else the least loaded. It knows no workflows: only what is cached now.
- `session`: sticky per workflow (Ray Serve `session_id` / consistent-hash pinning): a
  workflow's first call goes to the least loaded replica and every later call follows it.
  Its map is bounded: dropped at the workflow's end, silent workflows aged out, at most
  `max_workflows` entries (least recently active dropped first).
Defaults follow the published routers' defaults (SGLang: abs 32 / rel 1.0001 on running
requests; Ray: abs 10 on queue length, match rate 0.1) scaled to this model's request counts.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from agentrt.cluster.routing import ReplicaView, RouteRequest, Router, load_of


def least_loaded(replicas: Sequence[ReplicaView], start: int = 0) -> int:
    """The replica with the fewest requests running plus waiting; ties: first from `start` on."""
    n = len(replicas)
    best = start % n
    low = load_of(replicas[best])
    for k in range(1, n):
        i = (start + k) % n
        ld = load_of(replicas[i])
        if ld < low:
            best, low = i, ld
    return best


class RoundRobinRouter(Router):
    name = "round-robin"
    description = "replicas in turn, blind to load and cache"

    def __init__(self, seed: int = 0) -> None:
        super().__init__(seed)
        self._next = 0

    def route(self, request: RouteRequest, replicas: Sequence[ReplicaView], now: float) -> int:
        i = self._next % len(replicas)
        self._next = i + 1
        return i


class LeastLoadedRouter(Router):
    name = "least-loaded"
    description = "fewest requests running plus waiting, blind to the cache"

    def __init__(self, seed: int = 0) -> None:
        super().__init__(seed)
        self._start = 0

    def route(self, request: RouteRequest, replicas: Sequence[ReplicaView], now: float) -> int:
        i = least_loaded(replicas, self._start)
        self._start = i + 1
        return i


class PrefixRouter(Router):
    name = "prefix"
    description = "longest cached prefix unless load is imbalanced (Ray Serve / SGLang cache-aware)"

    def __init__(self, seed: int = 0, imbalance_abs: int = 10, imbalance_rel: float = 1.5,
                 match_threshold: float = 0.1) -> None:
        super().__init__(seed)
        if imbalance_abs < 0 or imbalance_rel < 1.0:
            raise ValueError("imbalance_abs must be >= 0 and imbalance_rel >= 1")
        self.imbalance_abs = imbalance_abs
        self.imbalance_rel = imbalance_rel
        self.match_threshold = match_threshold
        self._start = 0

    def imbalanced(self, replicas: Sequence[ReplicaView]) -> bool:
        # a view that is not live (an empty slot on Ray) is never chosen: its load says nothing
        loads = [load_of(v) for v in replicas if getattr(v, "live", True)]
        if len(loads) < 2:
            return False
        hi, lo = max(loads), min(loads)
        return hi - lo > self.imbalance_abs and hi > self.imbalance_rel * lo

    def route(self, request: RouteRequest, replicas: Sequence[ReplicaView], now: float) -> int:
        start = self._start
        self._start += 1
        if self.imbalanced(replicas):
            return least_loaded(replicas, start)
        n = len(replicas)
        best, best_len, best_load = -1, -1, 0
        for k in range(n):
            i = (start + k) % n
            v = replicas[i]
            m = v.cached_blocks(request.tenant, request.hash_ids)
            if m > best_len or (m == best_len and load_of(v) < best_load):
                best, best_len, best_load = i, m, load_of(v)
        full = len(request.hash_ids)
        if full and best_len >= self.match_threshold * full and best_len > 0:
            return best
        return least_loaded(replicas, start)


class SessionRouter(Router):
    name = "session"
    description = "sticky per workflow; a workflow's first call goes to the least loaded replica"

    def __init__(self, seed: int = 0, max_workflows: int = 65536, silent_after_s: float = 600.0) -> None:
        super().__init__(seed)
        if max_workflows < 1:
            raise ValueError(f"max_workflows must be >= 1, got {max_workflows}")
        self.max_workflows = max_workflows
        self.silent_after_s = silent_after_s
        self.homes: OrderedDict[tuple[str, str], tuple[int, float]] = OrderedDict()  # -> (replica, last seen)
        self._start = 0

    def route(self, request: RouteRequest, replicas: Sequence[ReplicaView], now: float) -> int:
        key = (request.tenant, request.workflow)
        home = self.homes.get(key)
        if home is not None and home[0] < len(replicas):
            return home[0]
        i = least_loaded(replicas, self._start)
        self._start = i + 1
        return i

    def on_routed(self, request: RouteRequest, replica: int, now: float) -> None:
        key = (request.tenant, request.workflow)
        self.homes[key] = (replica, now)
        self.homes.move_to_end(key)
        self._trim(now)

    def on_workflow_end(self, workflow: str, tenant: str, now: float) -> None:
        self.homes.pop((tenant, workflow), None)

    def _trim(self, now: float) -> None:
        homes = self.homes
        while homes:
            key, (_, seen) = next(iter(homes.items()))
            if len(homes) > self.max_workflows or now - seen > self.silent_after_s:
                del homes[key]
            else:
                break

    def state_size(self) -> int:
        return len(self.homes)

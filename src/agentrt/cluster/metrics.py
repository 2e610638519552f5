"""What a cluster replay measures: the engine's metrics over all replicas, plus balance.

- Cluster-wide figures (hit rate, TTFT and E2E percentiles, throughput...) are the single-replica
  `Metrics` summed over replicas (counts added, latency samples pooled), so one replica gives
  exactly the single-replica summary.
- Load imbalance = max / mean of the replicas' busy time (simulated seconds spent in iterations):
  1.0 is perfect balance, N means one replica did all the work.
- Per replica: calls routed, token hit rate, busy seconds.
- Router decision cost (seconds per `route` call) only when the run timed it (benchmarks).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np

from agentrt.engine.metrics import Metrics

def merge_metrics(parts: list[Metrics]) -> Metrics:
    """One `Metrics` for several replicas: counts summed, samples pooled, span widened."""
    out = Metrics()
    for m in parts:
        for f in fields(Metrics):
            k = f.name
            v = getattr(m, k)
            if isinstance(v, list):
                getattr(out, k).extend(v)
            elif k == "tenants":
                for name, ts in v.items():
                    o = out.tenant(name)
                    o.calls += ts.calls
                    o.prompt_tokens += ts.prompt_tokens
                    o.gpu_hit_tokens += ts.gpu_hit_tokens
                    o.ttft.extend(ts.ttft)
                    o.queue_wait.extend(ts.queue_wait)
            elif k == "first_arrival":
                if v is not None and (out.first_arrival is None or v < out.first_arrival):
                    out.first_arrival = v
            elif k == "last_arrival":
                if v is not None and (out.last_arrival is None or v > out.last_arrival):
                    out.last_arrival = v
            elif k == "last_finish":
                out.last_finish = max(out.last_finish, v)
            elif k == "wall_seconds":
                out.wall_seconds = max(out.wall_seconds, v)
            elif k == "call_log":
                if v is not None:
                    out.call_log = (out.call_log or []) + v
            else:
                setattr(out, k, getattr(out, k) + v)
    return out


@dataclass(slots=True)
class ReplicaStats:
    calls_routed: int
    calls: int
    hit_rate: float
    busy_s: float
    evictions: int

    def summary(self) -> dict:
        return {"calls_routed": self.calls_routed, "calls": self.calls, "hit_rate": self.hit_rate,
                "busy_s": self.busy_s, "evictions": self.evictions}


@dataclass(slots=True)
class ClusterMetrics:
    router: str
    replicas: list[ReplicaStats]
    total: Metrics
    late_arrivals: int = 0
    route_s: list[float] = field(default_factory=list)     # per decision, when timed
    router_state: int = 0                                   # entries the router held at the end
    placement: dict | None = None     # (workflow, call) -> replica, when the run recorded it
    orders: list | None = None        # per replica, (workflow, call) in admission order, likewise
    stream: list | None = None        # all replicas' block references in order, when recorded
    holds: list | None = None         # when calls held their blocks, beside the stream (bounds.held)
    stream_at: list | None = None     # the replica of each stream entry, likewise
    holds_at: list | None = None      # the replica of each hold, likewise

    @property
    def imbalance(self) -> float:
        busy = [r.busy_s for r in self.replicas]
        mean = sum(busy) / len(busy) if busy else 0.0
        return max(busy) / mean if mean > 0 else 1.0

    def summary(self) -> dict:
        """The engine's summary of the pooled metrics, plus the cluster's own figures."""
        out = self.total.summary()
        out.update(router=self.router, n_replicas=len(self.replicas), imbalance=self.imbalance,
                   router_state=self.router_state,
                   replicas=[r.summary() for r in self.replicas])
        if self.route_s:
            out.update(route_us_mean=float(np.mean(self.route_s)) * 1e6,
                       route_us_p99=float(np.percentile(self.route_s, 99)) * 1e6)
        return out


def cluster_metrics(sim) -> ClusterMetrics:
    """Collect a finished `ClusterSimulator`'s figures."""
    reps = []
    for i, s in enumerate(sim.sims):
        m = s.metrics
        reps.append(ReplicaStats(calls_routed=sim.routed[i], calls=m.calls,
                                 hit_rate=m.gpu_hit_tokens / (m.prompt_tokens or 1),
                                 busy_s=s.busy_s, evictions=s.cache.evictions))
    total = merge_metrics([s.metrics for s in sim.sims])
    total.late_arrivals = sim.replay.late_arrivals
    total.wall_seconds = sim.wall_seconds
    return ClusterMetrics(router=sim.router.name, replicas=reps, total=total,
                          late_arrivals=sim.replay.late_arrivals, route_s=list(sim.route_s),
                          router_state=sim.router.state_size(), placement=sim.placement,
                          orders=[s.admitted for s in sim.sims] if sim.placement is not None else None,
                          stream=sim.stream, holds=sim.holds,
                          stream_at=sim.stream_at, holds_at=sim.holds_at)

"""`fair`: weighted per-tenant shares of prefill and of the KV cache.

Model
- Prefill and decode work are shared by start-time fair queueing over tenants: each tenant has a
  virtual service `work / weight` (work in tokens, `service.py`), and the waiting call of the
  tenant with the least virtual service goes first, ties in arrival order. A tenant that was idle
  re-enters at the smallest virtual service among backlogged tenants, so idling banks no credit
  and a burst cannot be paid for by a quiet past.
- The KV cache is shared by weight too (`kvshare.py`): engines wrap the eviction policy so that
  while a tenant holds more cached blocks than its share, its blocks are evicted before any
  other tenant's. A burst therefore evicts its own cache first, never a quiet tenant's agents.
- Weights come from the `weights` option ("tenant:weight,..." or a dict); unnamed tenants weigh 1.
- When the best call does not fit, later calls are admitted into free blocks only, and the
  `max_wait_s` bound holds, as for every scheduler (`base.py`).
"""

from __future__ import annotations

from typing import ClassVar

from agentrt.runtime import events as ev
from agentrt.sched.base import DEFAULT_MAX_HOLD_S, DEFAULT_MAX_WAIT_S, Scheduler
from agentrt.sched.service import prefill_work


def parse_weights(weights: str | dict | None) -> dict[str, float]:
    """"a:2,b:1" or {"a": 2} -> {tenant: weight}; every weight must be > 0."""
    if weights is None or weights == "":
        return {}
    if isinstance(weights, str):
        out = {}
        for item in weights.split(","):
            name, sep, w = item.strip().rpartition(":")
            if not sep or not name:
                raise ValueError(f"weights item {item!r}: expected TENANT:WEIGHT")
            out[name] = float(w)
        weights = out
    if not isinstance(weights, dict):
        raise ValueError(f"weights must be 'tenant:weight,...' or a mapping, got {type(weights).__name__}")
    for name, w in weights.items():
        if not isinstance(w, (int, float)) or not w > 0 or w == float("inf"):
            raise ValueError(f"weight of tenant {name!r} must be a finite number > 0, got {w!r}")
    return {str(k): float(v) for k, v in weights.items()}


class FairScheduler(Scheduler):
    name: ClassVar[str] = "fair"
    description: ClassVar[str] = "per-tenant weighted fair shares of prefill (virtual time) and of the KV cache"
    reorders: ClassVar[bool] = True
    skips_blocked: ClassVar[bool] = True
    wants_events: ClassVar[bool] = True
    kv_shares: ClassVar[bool] = True
    shapes_batch: ClassVar[bool] = True

    def __init__(self, max_wait_s: float = DEFAULT_MAX_WAIT_S, seed: int = 0,
                 max_hold_s: float = DEFAULT_MAX_HOLD_S,
                 weights: str | dict | None = None) -> None:
        super().__init__(max_wait_s, seed, max_hold_s)
        self.weights = parse_weights(weights)
        self.virtual: dict[str, float] = {}
        self.backlog: dict[str, int] = {}       # calls arrived and not finished, per tenant

    def weight(self, tenant: str) -> float:
        return self.weights.get(tenant, 1.0)

    def observe(self, e) -> None:
        t = type(e)
        if t is ev.CallArrived:
            c = e.call
            if c.warmup or c.extra.get("resumed"):
                return
            n = self.backlog.get(c.tenant, 0)
            if n == 0:
                busy = [self.virtual.get(u, 0.0) for u, k in self.backlog.items() if k > 0]
                floor = min(busy) if busy else max(self.virtual.values(), default=0.0)
                self.virtual[c.tenant] = max(self.virtual.get(c.tenant, 0.0), floor)
            self.backlog[c.tenant] = n + 1
        elif t is ev.CallAdmitted:
            c = e.call
            if not c.warmup and not c.extra.get("resumed"):
                self.virtual[c.tenant] = (self.virtual.get(c.tenant, 0.0)
                                          + prefill_work(c, e.gpu_hit, e.host_hit) / self.weight(c.tenant))
        elif t is ev.CallFinished:
            c = e.call
            if c.warmup:
                return
            self.virtual[c.tenant] = self.virtual.get(c.tenant, 0.0) + c.output_length / self.weight(c.tenant)
            n = self.backlog.get(c.tenant, 0) - 1
            if n > 0:
                self.backlog[c.tenant] = n
            else:
                self.backlog.pop(c.tenant, None)

    def key(self, call, arrival, view):
        return (self.virtual.get(call.tenant, 0.0), arrival)

    def batch_key(self, call, arrival, prefill_left):
        return (self.virtual.get(call.tenant, 0.0), arrival)

    def state_bytes(self) -> int:
        return 150 * (len(self.virtual) + len(self.backlog))

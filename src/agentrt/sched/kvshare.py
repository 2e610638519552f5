"""Weighted per-tenant shares of the KV cache, as a wrapper around any eviction policy.

Model: the GPU pool is shared by tenant weight among the tenants that hold blocks or have calls
in flight, max-min fairly. What a tenant holds is its blocks in the cache tree (locked or not)
plus the blocks its running requests hold outside the tree (partial and output blocks,
`RadixKVCache.tenant_reserved`). Its guaranteed share is `capacity * weight / total weight`; a
tenant holding less keeps all it holds. What such tenants leave unused is split by weight among
the tenants over their guarantee (the level: `(capacity - held by the others) * weight / their
total weight`), so tenants that hold almost nothing (idle ones, or names invented to dilute the
shares) do not shrink what the contending tenants may keep. Blocks rank in three tiers: tenants
over the level first, then tenants over their guarantee, then the rest (`score` = (tier, inner
score)); within a tier the wrapped policy's order holds. With two tenants the level is never
exceeded (what they hold fits the pool), so the tiers are the guarantee's. Shares are of the
pool, not of what is cached: a burst that churns its own cache never shrinks a quiet tenant's
share, and running requests' blocks count against their own tenant. A tenant is over a bound
from above it until it falls below `bound * (1 - hysteresis)`, so membership (an epoch bump: the
cache re-ranks once) changes rarely. Shares are re-checked on every engine event (or, with
`recheck_on_events=False`, whenever the owner calls `recheck`), from the
cache's per-tenant counts, never from the clock. A prefetch's `evict_below` bound is translated
into the wrapper's key space: it may evict blocks of tenants over their guarantee, and other
blocks only below the wrapped policy's bound.
Cost: a re-check is O(active tenants) (1,000 tenants: about 0.2 ms, `benchmarks/policy_overhead.py
--shares-tenants`); the simulator re-checks on every event, vLLM's connector once per step.
"""

from __future__ import annotations

from agentrt.runtime import events as ev
from agentrt.runtime.policy import Policy
from agentrt.runtime.wrapped import WrappedPolicy


class TenantShares(WrappedPolicy):
    def __init__(self, inner: Policy, weights: dict[str, float] | None = None,
                 hysteresis: float = 0.05, recheck_on_events: bool = True) -> None:
        if not 0.0 <= hysteresis < 1.0:
            raise ValueError(f"hysteresis must be in [0, 1), got {hysteresis}")
        super().__init__(inner)
        self.weights = dict(weights or {})
        self.hysteresis = hysteresis
        # False: the owner calls `recheck` itself (vLLM's connector: once per scheduler step)
        self.recheck_on_events = recheck_on_events
        self.over: set[str] = set()       # over their guaranteed share
        self.beyond: set[str] = set()     # of those, over the max-min level
        self.inflight: dict[str, int] = {}
        self.cache = None

    def attach(self, cache) -> None:
        """The cache whose per-tenant block counts define the shares."""
        self.cache = cache

    def observe(self, e) -> None:
        t = type(e)
        if t is ev.CallArrived and not e.call.extra.get("resumed"):
            self.inflight[e.call.tenant] = self.inflight.get(e.call.tenant, 0) + 1
        elif t is ev.CallFinished:
            n = self.inflight.get(e.call.tenant, 0) - 1
            if n > 0:
                self.inflight[e.call.tenant] = n
            else:
                self.inflight.pop(e.call.tenant, None)
        self.inner.observe(e)
        if self.recheck_on_events:
            self.recheck()

    def recheck(self) -> None:
        """Which tenants are over their guarantee and over the level, from the attached cache's
        counts (bumps the epoch on a change). O(active tenants), one pass each for the two tiers."""
        if self.cache is None:
            return
        cache = self.cache
        held = {t: n for t, n in cache.tenant_blocks.items() if n > 0}
        for t in self.inflight:
            held.setdefault(t, 0)
        for t, n in cache.tenant_reserved.items():
            if n and t in held:
                held[t] += n
        over: set[str] = set()
        beyond: set[str] = set()
        if len(held) >= 2:
            # unnamed tenants weigh 1: without weights every bound is one `amount / count`
            w = {t: self.weights.get(t, 1.0) for t in held} if self.weights else None
            over = self._above(held, held, cache.gpu_capacity, w, self.over)
            if len(over) >= 2:
                rest = cache.gpu_capacity - sum(n for t, n in held.items() if t not in over)
                beyond = self._above(held, over, rest, w, self.beyond)
        if over != self.over or beyond != self.beyond:
            self.over = over
            self.beyond = beyond
            self._bumps += 1

    def _above(self, held: dict[str, int], names, amount: float, w: dict[str, float] | None,
               was: set[str]) -> set[str]:
        """Of `names`, the tenants holding more than their weighted part of `amount` (computed as
        `amount * weight / total weight`, as the definition reads), or, already in `was`, more
        than `1 - hysteresis` of it."""
        keep = 1.0 - self.hysteresis
        if w is None:
            g = amount * 1.0 / len(names)
            lo = g * keep
            return {t for t in names if held[t] > g or (held[t] > lo and t in was)}
        total = sum(w[t] for t in names)
        return {t for t in names if held[t] > amount * w[t] / total
                or (t in was and held[t] > amount * w[t] / total * keep)}

    def _tier(self, tenant: str) -> int:
        return 2 if tenant not in self.over else 0 if tenant in self.beyond else 1

    def score(self, block):
        return (self._tier(block.tenant), self.inner.score(block))

    def fallback_key(self, block):
        """The LRU order the safety net falls back to keeps the share tiers (`runtime/safety_net.py`)."""
        return (self._tier(block.tenant), block.last_touch)

    @staticmethod
    def bound(evict_below):
        """A wrapped policy's eviction bound in this wrapper's key space: within-share blocks
        must rank below it, and every block of a tenant over its share already does."""
        return (2, evict_below)

    def stats(self) -> dict[str, int | float]:
        """The wrapped policy's numbers, and the tenants now over their share."""
        return dict(self.inner.stats(), tenants_over_share=len(self.over),
                    tenants_over_level=len(self.beyond))

    def state_bytes(self) -> int:
        return self.inner.state_bytes() + 100 * (len(self.inflight) + len(self.over) + len(self.beyond))

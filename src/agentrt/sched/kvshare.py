"""Weighted per-tenant shares of the KV cache, as a wrapper around any eviction policy.

Model: the GPU pool is shared by tenant weight among the tenants that hold blocks or have calls
in flight: a tenant's share is `capacity * weight / total weight`, and what it holds is its
blocks in the cache tree (locked or not) plus the blocks its running requests hold outside the
tree (partial and output blocks, `RadixKVCache.tenant_reserved`). While a tenant holds more than
its share, its blocks rank before every other tenant's (`score` = (within share, inner score));
within each group the wrapped policy's order holds. Shares are of the pool, not of what is
cached, so a tenant whose demand is below its share keeps all of it (max-min fairness): a burst
that churns its own cache never shrinks a quiet tenant's share, and running requests' blocks
count against their own tenant. A tenant is over its share from above `share` until it falls
below `share * (1 - hysteresis)`, so membership (an epoch bump: the cache re-ranks once) changes
rarely. Shares are re-checked on every engine event, from the cache's per-tenant counts, never
from the clock. A
prefetch's `evict_below` bound is translated into the wrapper's key space: it may evict blocks
of a tenant over its share, and other blocks only below the wrapped policy's bound.
"""

from __future__ import annotations

from agentrt.runtime import events as ev
from agentrt.runtime.actions import Prefetch
from agentrt.runtime.policy import Policy

_FORWARDED_FLAGS = ("needs_tags", "acts", "untags_dead_branches")


class TenantShares(Policy):
    def __init__(self, inner: Policy, weights: dict[str, float] | None = None,
                 hysteresis: float = 0.05) -> None:
        if not 0.0 <= hysteresis < 1.0:
            raise ValueError(f"hysteresis must be in [0, 1), got {hysteresis}")
        self.inner = inner
        self.name = inner.name
        self.seed = inner.seed
        self.runtime = None
        self.weights = dict(weights or {})
        self.hysteresis = hysteresis
        self.over: set[str] = set()
        self.inflight: dict[str, int] = {}
        self.cache = None
        self._bumps = 0
        self.dynamic = True
        self.wants_events = True
        for flag in _FORWARDED_FLAGS:
            setattr(self, flag, getattr(inner, flag))

    def __getattr__(self, item):
        # anything else (a predictor, training hooks) is the wrapped policy's
        if item == "inner":
            raise AttributeError(item)
        return getattr(self.inner, item)

    @property
    def epoch(self) -> int:
        return self.inner.epoch + self._bumps

    @property
    def needs_training(self) -> bool:
        return self.inner.needs_training

    def attach(self, cache) -> None:
        """The cache whose per-tenant block counts define the shares."""
        self.cache = cache

    def bind(self, runtime) -> None:
        self.runtime = runtime
        self.inner.bind(runtime)

    def train(self, calls, block_size: int = 16) -> None:
        self.inner.train(calls, block_size)

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
        self.recheck()

    def recheck(self) -> None:
        """Which tenants are over their share, from the attached cache's counts (bumps the epoch on a change)."""
        if self.cache is None:
            return
        cache = self.cache
        blocks = cache.tenant_blocks
        reserved = cache.tenant_reserved
        active = {t for t, n in blocks.items() if n > 0}
        active.update(self.inflight)
        if len(active) < 2:
            if self.over:
                self.over = set()
                self._bumps += 1
            return
        pool = cache.gpu_capacity
        total_w = sum(self.weights.get(t, 1.0) for t in active)
        over = set()
        for t in active:
            share = pool * self.weights.get(t, 1.0) / total_w
            n = blocks.get(t, 0) + reserved.get(t, 0)
            if n > share or (t in self.over and n > share * (1.0 - self.hysteresis)):
                over.add(t)
        if over != self.over:
            self.over = over
            self._bumps += 1

    def score(self, block):
        return (block.tenant not in self.over, self.inner.score(block))

    def predict(self, horizon: int):
        return self.inner.predict(horizon)

    def act(self, now: float, view) -> list:
        acts = self.inner.act(now, view)
        for a in acts:
            # a prefetch's bound is in the wrapped policy's key space: within-share blocks must
            # rank below it, and every block of a tenant over its share already does
            if isinstance(a, Prefetch) and a.evict_below is not None:
                a.evict_below = self.bound(a.evict_below)
        return acts

    @staticmethod
    def bound(evict_below):
        """A wrapped policy's eviction bound in this wrapper's key space."""
        return (True, evict_below)

    def stats(self) -> dict[str, int | float]:
        """The wrapped policy's numbers, and the tenants now over their share."""
        return dict(self.inner.stats(), tenants_over_share=len(self.over))

    def state_bytes(self) -> int:
        return self.inner.state_bytes() + 100 * (len(self.inflight) + len(self.over))

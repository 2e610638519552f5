"""A policy wrapped by another that composes tiers or floors with its scores (tenant shares,
client retention), so those live beside any policy rather than inside one.

The wrapper keys a block by (its own tier, the wrapped policy's key): within a tier the wrapped
policy's order holds. Everything else is the wrapped policy's: its flags, training, predictions,
actions (a prefetch's `evict_below` bound is translated into the wrapper's key space by `bound`),
stats and any attribute the wrapper does not define. The epoch is the wrapped policy's plus the
wrapper's own bumps (`_bumps`), so the cache re-ranks when either changes a key.
"""

from __future__ import annotations

from agentrt.runtime.actions import Prefetch
from agentrt.runtime.policy import Policy

FORWARDED_FLAGS = ("needs_tags", "acts", "untags_dead_branches")


class WrappedPolicy(Policy):
    def __init__(self, inner: Policy) -> None:
        self.inner = inner
        self.name = inner.name
        self.seed = inner.seed
        self.runtime = None
        self._bumps = 0
        self.dynamic = True
        self.wants_events = True
        for flag in FORWARDED_FLAGS:
            setattr(self, flag, getattr(inner, flag))
        self.safety_net = getattr(inner, "safety_net", True)   # a bound under a wrapper stays unnetted

    def __getattr__(self, item):
        # anything else (a predictor, training hooks, an inner wrapper's state) is the wrapped policy's
        if item == "inner":
            raise AttributeError(item)
        return getattr(self.inner, item)

    @property
    def epoch(self) -> int:
        return self.inner.epoch + self._bumps

    @property
    def needs_training(self) -> bool:
        return self.inner.needs_training

    def bind(self, runtime) -> None:
        self.runtime = runtime
        self.inner.bind(runtime)

    def train(self, calls, block_size: int = 16) -> None:
        self.inner.train(calls, block_size)

    def observe(self, e) -> None:
        self.inner.observe(e)

    def predict(self, horizon: int):
        return self.inner.predict(horizon)

    def act(self, now: float, view) -> list:
        acts = self.inner.act(now, view)
        for a in acts:
            # a prefetch's bound is in the wrapped policy's key space: translate it into this one's
            if isinstance(a, Prefetch) and a.evict_below is not None:
                a.evict_below = self.bound(a.evict_below)
        return acts

    @staticmethod
    def bound(evict_below):
        """A wrapped policy's eviction bound in this wrapper's key space (the lowest tier's)."""
        return (0, evict_below)

    def stats(self) -> dict[str, int | float]:
        return self.inner.stats()

    def state_bytes(self) -> int:
        return self.inner.state_bytes()

"""Decode fast-forward: `FastForward`, the `Simulator`'s part that runs decode-only stretches.

A stretch of decode-only iterations changes no request's state until an outside event (an
arrival, the end of a host or peer load, a held call's release, another replica's turn in a
cluster: the simulator passes the earliest as `limit`) or a finish, so it is advanced step by
step on the cost model alone, without touching the requests each step. As in the step-by-step model, the blocks the stretch crosses into are taken
at its start (free blocks, then evictions in the policy's order); when they do not all fit, the
stretch is cut to the most steps whose blocks fit, so it stops before the first step that would
need a preemption (which the next ordinary iteration then handles).
"""

from __future__ import annotations

from agentrt.cache.radix import RadixKVCache
from agentrt.engine.costs import CostModel
from agentrt.engine.request import Request


class FastForward:
    def __init__(self, cache: RadixKVCache, cost: CostModel, block_size: int) -> None:
        self.cache = cache
        self.cost = cost
        self.block_size = block_size

    def run(self, decode: list[Request], ctx: int, steps_max: int, now: float, limit: float) -> float | None:
        """Run up to `steps_max` decode-only iterations from `now` that change no request's
        state, starting none at or after `limit`, and taking the blocks they cross into at the
        start; stop before a step that would have to preempt. Returns when the stretch ends, or
        None if no step could run."""
        b = len(decode)
        bs = self.block_size
        it = self.cost.iteration
        ctx0 = ctx
        while True:
            t = now
            ctx = ctx0
            steps = 0
            while steps < steps_max and t < limit:
                t += it(b, ctx, ctx)
                ctx += b
                steps += 1
            if steps == 0:
                return None
            wants = []
            total = 0
            for r in decode:
                c = r.context
                r.context = c + steps
                r.output_left -= steps
                if r.lease is not None:
                    n = (c + steps - 1) // bs - c // bs     # see _ff_blocks
                    if n:
                        wants.append((r.lease, n))
                        total += n
            if not total or self.cache.grow_all(wants, total):
                break
            for r in decode:                 # rare: the pool runs out within the stretch
                r.context -= steps
                r.output_left += steps
            steps_max = self._ff_fit(decode, steps)
        return t

    def _ff_blocks(self, decode: list[Request], steps: int) -> tuple[list, int]:
        """The blocks `steps` fast-forwarded steps cross into: [(lease, n)], total. Step s runs at
        context c + s, and step 0's block was taken before the iteration."""
        bs = self.block_size
        wants = []
        total = 0
        for r in decode:
            lease = r.lease
            if lease is not None:
                c = r.context
                n = (c + steps - 1) // bs - c // bs
                if n:
                    wants.append((lease, n))
                    total += n
        return wants, total

    def _ff_fit(self, decode: list[Request], steps: int) -> int:
        """The most steps (< `steps`, which does not fit) whose blocks fit in free + evictable."""
        avail = self.cache.free + self.cache.evictable
        lo, hi = 1, steps           # 1 step needs no block; `steps` needs more than `avail`
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self._ff_blocks(decode, mid)[1] <= avail:
                lo = mid
            else:
                hi = mid
        return lo

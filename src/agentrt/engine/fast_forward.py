"""Decode fast-forward: a mixin of `Simulator`.

A stretch of decode-only iterations changes no request's state until an outside event (an
arrival, the end of a host or peer load, another replica's turn in a cluster: `horizon`) or a
finish, so the simulator advances it step by step on the cost model alone, without touching the
requests each step. As in the step-by-step model, the blocks the stretch crosses into are taken
at its start (free blocks, then evictions in the policy's order); when they do not all fit, the
stretch is cut to the most steps whose blocks fit, so it stops before the first step that would
need a preemption (which the next ordinary iteration then handles).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentrt.engine.request import Request

if TYPE_CHECKING:
    from agentrt.engine.simulator import Simulator


class FastForward:
    def _fast_forward(self: "Simulator", decode: list[Request], ctx: int, steps_max: int,
                      loading_until: float | None) -> bool:
        """Run up to `steps_max` decode-only iterations that change no request's state, taking the
        blocks they cross into at the start; stop before a step that would have to preempt."""
        limit = self.replay.next_arrival()
        if self.horizon is not None and (limit is None or self.horizon < limit):
            limit = self.horizon
        if loading_until is not None and (limit is None or loading_until < limit):
            limit = loading_until
        wake = self._wake_at                        # a held call's release (fair, agent)
        if wake is not None and (limit is None or wake < limit):
            limit = wake
        if limit is None:
            limit = float("inf")
        b = len(decode)
        bs = self.config.block_size
        it = self.cost.iteration
        ctx0 = ctx
        while True:
            t = self.now
            ctx = ctx0
            steps = 0
            while steps < steps_max and t < limit:
                t += it(b, ctx, ctx)
                ctx += b
                steps += 1
            if steps == 0:
                return False
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
        self._last_decode_only = True
        self._last_iter_s = t - self.now
        self.busy_s += t - self.now
        self.now = t
        return True

    def _ff_blocks(self: "Simulator", decode: list[Request], steps: int) -> tuple[list, int]:
        """The blocks `steps` fast-forwarded steps cross into: [(lease, n)], total. Step s runs at
        context c + s, and step 0's block was taken before the iteration."""
        bs = self.config.block_size
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

    def _ff_fit(self: "Simulator", decode: list[Request], steps: int) -> int:
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

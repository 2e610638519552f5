"""An iteration's prefill chunks: `PrefillBatch`, the `Simulator`'s batch planner.

What is left of the token budget after the decode steps goes to admitted requests that still
prefill, in admission order, or in the scheduler's order when it `shapes_batch` (then each
tenant's share is capped by `Scheduler.prefill_cap`).

With `cache_at="schedule"` (vLLM V1) the iteration is planned as vLLM's scheduler plans a step:
requests already running get their chunks first, then waiting requests are admitted one by one,
each given its first chunk before the next is looked up; a chunk's full blocks enter the cache
as it is scheduled, so a request admitted after it in the same iteration matches them. A request
admitted with no budget left is matched again before its first chunk (`cache/radix.py`).
"""

from __future__ import annotations

from collections.abc import Callable

from agentrt.cache.radix import RadixKVCache
from agentrt.engine.metrics import Metrics
from agentrt.engine.request import PREFILL, Request
from agentrt.sched.base import Scheduler


class ChunkPlan:
    """One iteration's batch as it is planned: the chunks, and the tokens, attention pairs and KV
    read so far (starting from the decode steps'), the context before its prefill chunks, the
    budget left, the tenants' prefill caps."""
    __slots__ = ("chunks", "tokens", "pairs", "kv", "prefill_context", "budget", "caps")

    def __init__(self, tokens: int, pairs: float, kv: float, budget: int, shapes: bool) -> None:
        self.chunks: list[tuple[Request, int]] = []
        self.tokens = tokens
        self.pairs = pairs
        self.kv = kv
        self.prefill_context = 0.0
        self.budget = budget
        self.caps: dict[str, int] | None = {} if shapes else None   # tenant -> tokens it may still take


class PrefillBatch:
    def __init__(self, cache: RadixKVCache, sched: Scheduler, metrics: Metrics, running: list[Request],
                 match_at_schedule: Callable[[Request], None], block_size: int, shapes: bool,
                 at_schedule: bool) -> None:
        """`running`: the engine's running requests (changed in place), in admission order;
        `match_at_schedule`: looks the cache up again before a first chunk (`lifecycle.py`)."""
        self.cache = cache
        self.sched = sched
        self.metrics = metrics
        self.running = running
        self.match_at_schedule = match_at_schedule
        self.block_size = block_size
        self.shapes = shapes              # the scheduler orders the chunks (`shapes_batch`)
        self.at_schedule = at_schedule    # cache_at="schedule"

    def plan_prefills(self, plan: ChunkPlan, now: float) -> None:
        """Give the admitted requests that still prefill their chunks, in order, while budget lasts."""
        if plan.budget <= 0:
            return
        plan_chunk = self.plan_chunk
        for r in (self._prefill_order(now) if self.shapes else self.running):
            if r.state == PREFILL and not plan_chunk(plan, r, now):
                break

    def plan_chunk(self, plan: ChunkPlan, r: Request, now: float) -> bool:
        """Add `r`'s next chunk to the plan; False once the budget is spent."""
        budget = plan.budget
        at_schedule = self.at_schedule
        if at_schedule and r.context == r.hit_tokens and r.lease is not None:
            self.match_at_schedule(r)     # its first chunk: look the cache up again
        n = r.prefill_left if r.prefill_left < budget else budget
        caps = plan.caps
        if caps is not None:
            t = r.info.tenant
            left = caps.get(t)
            if left is None:
                left = self.sched.prefill_cap(t, budget)
            if n > left:
                n = left
            caps[t] = left - n
            if n <= 0:
                return True
        plan.chunks.append((r, n))
        if at_schedule and r.lease is not None:
            self.metrics.block_touches += self.cache.commit_prompt(r.lease, now, (r.context + n) // self.block_size)
        plan.tokens += n
        plan.pairs += n * (r.context + (n + 1) / 2.0)
        plan.kv += r.context + n
        plan.prefill_context += r.context
        plan.budget = budget - n
        return plan.budget > 0

    def _prefill_order(self, now: float) -> list[Request]:
        """Admitted requests in the order the scheduler gives them prefill tokens."""
        pre = [r for r in self.running if r.state == PREFILL]
        if len(pre) > 1:
            rank = self.sched.batch_rank
            pre.sort(key=lambda r: rank(r.info, r.arrival, r.prefill_left, now))
        return pre

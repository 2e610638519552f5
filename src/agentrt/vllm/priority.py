"""An agentrt scheduler's ranking carried into vLLM as each request's `priority`.

vLLM 0.32 (`vllm/v1/core/sched/scheduler.py`, `request_queue.py`) with `--scheduling-policy
priority` keeps its waiting queue as a heap on (priority, arrival time, request id): lower
priority first, ties in arrival order. The head of that order blocks the rest when it does not
fit in free KV memory (no backfill). When a running request cannot grow, the running request
with the largest (priority, arrival time) is preempted and goes back to the waiting heap. The
priority comes from the OpenAI request body's integer `priority` (default 0, int64) or, winning
over the body, from the `X-Vllm-Priority` header. Under the default `--scheduling-policy fcfs`
the field is accepted and ignored.

A priority is fixed when the request is submitted, so an agentrt `Scheduler` is asked once per
call, at its arrival (`Scheduler.priority`: the leading number of its sort key, rounded). Its
state is fed with the events the submitting side sees: arrival, admission (cached tokens are
known from the response's usage, so admission is reported when the call ends), finish, and
workflow end. The view of the cache the scheduler reads (`cached_blocks`) is whatever the caller
knows (an estimate from earlier responses; 0 when unknown). What cannot be carried: `max_wait_s`
(vLLM re-ranks nothing after submission), backfill past a blocked head (`skips_blocked`),
holding new workflows back (`defer`, `max_hold_s`: every request is submitted at once), the
prefill order inside a batch (`batch_key`), and the `fair` scheduler's KV-cache shares (only its
prefill order is carried).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from agentrt.runtime import events as ev

if TYPE_CHECKING:
    from agentrt.sched.base import Scheduler

SCHEDULING_POLICY_ARGS = ("--scheduling-policy", "priority")   # the vLLM server flag this needs
PRIORITY_HEADER = "x-vllm-priority"                              # vLLM reads it before the body
WARMUP_PRIORITY = 2 ** 62                                        # after every user call
INT64 = (-(2 ** 63), 2 ** 63 - 1)


def needs_priority(scheduler: str) -> bool:
    """Whether `scheduler` orders calls other than by arrival (vLLM must run `priority`)."""
    from agentrt.sched.registry import make_scheduler
    return bool(make_scheduler(scheduler).reorders)


class FixedView:
    """A `QueueView` at one moment: `cached_blocks` from a callable (0 when none is given)."""

    __slots__ = ("now", "_cached")

    def __init__(self, now: float, cached: Callable[[ev.CallInfo], int] | None = None) -> None:
        self.now = now
        self._cached = cached

    def cached_blocks(self, call: ev.CallInfo) -> int:
        return int(self._cached(call)) if self._cached is not None else 0


class PriorityFeeder:
    """A scheduler instance fed with submission-side events; gives each call its vLLM priority."""

    def __init__(self, scheduler: "Scheduler") -> None:
        self.scheduler = scheduler
        self.count = 0
        self.low: int | None = None
        self.high: int | None = None
        self._distinct: set[int] = set()

    @property
    def name(self) -> str:
        return self.scheduler.name

    def _observe(self, e) -> None:
        if self.scheduler.wants_events:
            self.scheduler.observe(e)

    def arrive(self, info: ev.CallInfo, now: float,
               cached: Callable[[ev.CallInfo], int] | None = None) -> int:
        """Observe the call's arrival and return its priority (an int64, lower first)."""
        self._observe(ev.CallArrived(now, info))
        p = self.scheduler.priority(info, now, FixedView(now, cached))
        p = max(INT64[0], min(INT64[1], int(p)))
        self.count += 1
        self.low = p if self.low is None else min(self.low, p)
        self.high = p if self.high is None else max(self.high, p)
        if len(self._distinct) < 10_000:
            self._distinct.add(p)
        return p

    def done(self, info: ev.CallInfo, now: float, gpu_hit_blocks: int, output_length: int | None = None,
             admitted: bool = True) -> None:
        """The call ended: its admission (with the cached prefix the engine reported), then its
        finish with `output_length` (the tokens it produced, when known). A call that failed
        (`admitted=False`) only finishes: it took no service."""
        if output_length is not None:
            info.output_length = output_length
        if admitted:
            self._observe(ev.CallAdmitted(now, info, None, max(0, gpu_hit_blocks), 0))
        self._observe(ev.CallFinished(now, info, None))

    def workflow_ended(self, workflow: str, tenant: str, now: float) -> None:
        self._observe(ev.WorkflowEnded(now, workflow, tenant))

    def stats(self) -> dict:
        return {"scheduler": self.name, "requests": self.count, "min": self.low, "max": self.high,
                "distinct": len(self._distinct)}

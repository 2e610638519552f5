"""The published baselines on the scheduler hook: longest prefix match and least attained service.

- `lpm` (SGLang's longest-prefix-match policy): the waiting call with the most prompt blocks
  resident on the GPU goes first, ties in arrival order. It maximises reuse at each admission and
  knows nothing of workflows.
- `las` (Autellix's PLAS, program-level least attained service): the call whose workflow has
  received the least service so far goes first, ties in arrival order, so short workflows are
  not stuck behind long ones without knowing any workflow's length. Admitted calls get the
  iteration's prefill tokens in the same order. Autellix discretises
  priorities into queues for its implementation; the exact order is kept here.
Both inherit the `max_wait_s` starvation bound of `Scheduler`.
"""

from __future__ import annotations

from typing import ClassVar

from agentrt.sched.base import DEFAULT_MAX_HOLD_S, DEFAULT_MAX_WAIT_S, Scheduler
from agentrt.sched.service import AttainedService


class LPMScheduler(Scheduler):
    name: ClassVar[str] = "lpm"
    description: ClassVar[str] = "longest cached prefix first, as SGLang's LPM"
    reorders: ClassVar[bool] = True
    reads_cache: ClassVar[bool] = True

    def key(self, call, arrival, view):
        return (-view.cached_blocks(call), arrival)


class LASScheduler(Scheduler):
    name: ClassVar[str] = "las"
    description: ClassVar[str] = "least attained service per workflow first, as Autellix's PLAS"
    reorders: ClassVar[bool] = True
    wants_events: ClassVar[bool] = True
    shapes_batch: ClassVar[bool] = True

    def __init__(self, max_wait_s: float = DEFAULT_MAX_WAIT_S, seed: int = 0,
                 max_hold_s: float = DEFAULT_MAX_HOLD_S) -> None:
        super().__init__(max_wait_s, seed, max_hold_s)
        self.service = AttainedService()

    def observe(self, event) -> None:
        self.service.observe(event)

    def key(self, call, arrival, view):
        return (self.service.of(call), arrival)

    def batch_key(self, call, arrival, prefill_left):
        return (self.service.of(call), arrival)

    def state_bytes(self) -> int:
        return 120 * len(self.service.work)

"""Who sees the simulated engine's events: the policy runtime, the scheduler, both or neither.

The engine's parts (`lifecycle.py`, `admission.py`, `actions.py`) report `runtime.events` through
one shared `Observers`: `on` says whether anyone listens (events are not even built otherwise),
`observe` delivers one. Both are plain attributes, so a harness may wrap `observe` (and set `on`)
after the simulator is built; every part reads them at the time of the event.
"""

from __future__ import annotations

from collections.abc import Callable

from agentrt.runtime.runtime import AgentRuntime
from agentrt.sched.base import Scheduler


class Observers:
    __slots__ = ("on", "observe")

    def __init__(self, runtime: AgentRuntime, sched: Scheduler) -> None:
        self.on: bool = runtime.wants_events or sched.wants_events
        self.observe: Callable[[object], None] = _combined(runtime, sched)


def _combined(rt: AgentRuntime, sched: Scheduler) -> Callable[[object], None]:
    if not sched.wants_events:
        return rt.observe
    if not rt.wants_events:
        return sched.observe

    def both(e) -> None:
        rt.observe(e)
        sched.observe(e)
    return both

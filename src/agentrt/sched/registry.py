"""Schedulers by name: every scheduler the CLI, the simulator and the server can run."""

from __future__ import annotations

from agentrt.errors import AgentrtError, unknown_name
from agentrt.sched.agent import AgentScheduler
from agentrt.sched.base import Scheduler
from agentrt.sched.basic import LASScheduler, LPMScheduler
from agentrt.sched.fair import FairScheduler

DEFAULT_SCHEDULER = "fcfs"

_CLASSES: dict[str, type[Scheduler]] = {
    c.name: c for c in (Scheduler, LPMScheduler, LASScheduler, FairScheduler, AgentScheduler)}


def scheduler_names() -> list[str]:
    return list(_CLASSES)


def describe_scheduler(name: str) -> str:
    c = _CLASSES.get(name)
    return c.description if c is not None else ""


def check_scheduler(name: str) -> None:
    if name not in _CLASSES:
        raise unknown_name("scheduler", name, scheduler_names())


def make_scheduler(name: str, **options) -> Scheduler:
    check_scheduler(name)
    try:
        return _CLASSES[name](**options)
    except (TypeError, ValueError) as e:
        raise AgentrtError(f"bad option for scheduler '{name}': {e}") from None

"""Schedulers by name: every scheduler the CLI, the simulator and the server can run
(`agentrt.registry.Registry`, the mechanism policies and routers share)."""

from __future__ import annotations

from agentrt.registry import Registry
from agentrt.sched.base import Scheduler

DEFAULT_SCHEDULER = "fcfs"


def _builtins():
    from agentrt.sched.agent import AgentScheduler
    from agentrt.sched.basic import LASScheduler, LPMScheduler
    from agentrt.sched.fair import FairScheduler
    return (Scheduler, LPMScheduler, LASScheduler, FairScheduler, AgentScheduler)


SCHEDULERS = Registry("scheduler", _builtins, Scheduler)
scheduler_names = SCHEDULERS.names
describe_scheduler = SCHEDULERS.describe
check_scheduler = SCHEDULERS.check
scheduler_class = SCHEDULERS.cls
make_scheduler = SCHEDULERS.make

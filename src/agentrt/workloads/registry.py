"""Workload generators by name."""

from __future__ import annotations

from agentrt.errors import unknown_name
from agentrt.workloads.base import Workload

_WORKLOADS: dict[str, type[Workload]] = {}


def register(cls: type[Workload]) -> type[Workload]:
    _WORKLOADS[cls.name] = cls
    return cls


def _ensure_builtin() -> None:
    if _WORKLOADS:
        return
    from agentrt.workloads.builtin import TeamWorkload
    register(TeamWorkload)


def workload_names() -> list[str]:
    _ensure_builtin()
    return list(_WORKLOADS)


def get_workload(name: str) -> Workload:
    _ensure_builtin()
    if name not in _WORKLOADS:
        raise unknown_name("workload", name, list(_WORKLOADS))
    return _WORKLOADS[name]()

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
    from agentrt.workloads.coding import CodingWorkload
    from agentrt.workloads.financebench import FinancebenchWorkload
    from agentrt.workloads.gaia import GaiaWorkload
    from agentrt.workloads.gsm8k import Gsm8kWorkload
    from agentrt.workloads.hover import HoverWorkload
    from agentrt.workloads.humaneval import HumanevalWorkload
    from agentrt.workloads.mix import MixWorkload
    from agentrt.workloads.mmlu import MmluWorkload
    from agentrt.workloads.mtbench import MtbenchWorkload
    from agentrt.workloads.randomapp import RandomAppWorkload
    from agentrt.workloads.swebench import SwebenchWorkload
    for cls in (TeamWorkload, HoverWorkload, SwebenchWorkload, FinancebenchWorkload, MmluWorkload,
                MtbenchWorkload, GaiaWorkload, Gsm8kWorkload, HumanevalWorkload, MixWorkload,
                CodingWorkload, RandomAppWorkload):
        register(cls)


def workload_names() -> list[str]:
    _ensure_builtin()
    return list(_WORKLOADS)


def workload_summaries() -> dict[str, str]:
    _ensure_builtin()
    return {n: cls.summary for n, cls in _WORKLOADS.items()}


def get_workload(name: str) -> Workload:
    _ensure_builtin()
    if name not in _WORKLOADS:
        raise unknown_name("workload", name, list(_WORKLOADS))
    return _WORKLOADS[name]()

"""Workload generators by name, with their options (`agentrt generate NAME --set OPTION=VALUE`).

A generator's options are its constructor's keyword arguments; the defaults are the shape its
docstring describes, so a trace generated without options never changes when one is added.
"""

from __future__ import annotations

from agentrt.errors import AgentrtError, unknown_name
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


def workload_option_names(name: str) -> list[str]:
    """The options generator `name` takes (its constructor's keywords), in signature order."""
    from agentrt.registry import class_parameters
    _ensure_builtin()
    if name not in _WORKLOADS:
        raise unknown_name("workload", name, list(_WORKLOADS))
    return [p.name for p in class_parameters(_WORKLOADS[name]) or []]


def get_workload(name: str, options: dict | None = None) -> Workload:
    """Generator `name` with `options` (checked: an unknown option or a bad value raises
    `AgentrtError` naming it)."""
    _ensure_builtin()
    if name not in _WORKLOADS:
        raise unknown_name("workload", name, list(_WORKLOADS))
    if not options:
        return _WORKLOADS[name]()
    valid = workload_option_names(name)
    for opt in options:
        if opt not in valid:
            raise AgentrtError(f"--set {opt}: workload '{name}' has no option '{opt}'; its options: "
                               + (", ".join(valid) or "none"))
    try:
        wl = _WORKLOADS[name](**options)
    except (TypeError, ValueError) as e:
        raise AgentrtError(f"workload '{name}': {e}") from None
    wl.options = dict(options)
    return wl

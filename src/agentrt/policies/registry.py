"""Policies by name: every policy the CLI, the simulator, the vLLM connector and the server can run.

The bounds are not policies an engine can run; they are listed here so that every tool accepts
the same names, and engines other than the simulator refuse them. `oracle` is a clairvoyant
eviction policy that `agentrt bench` runs inside the simulator (same memory accounting as every
policy: the reachable bound); `belady` and `infinite` are offline bounds computed from a replay's
block-access stream (they ignore the memory running requests hold).
"""

from __future__ import annotations

from collections.abc import Callable

from agentrt.errors import AgentrtError, unknown_name
from agentrt.runtime.policy import Policy

BOUNDS = ("oracle", "belady", "infinite")
SIM_BOUNDS = ("oracle",)      # bounds that run in the simulator, with timings

_FACTORIES: dict[str, Callable[..., Policy]] = {}
_DESCRIPTIONS: dict[str, str] = {
    "oracle": "clairvoyant eviction, next use from the trace, under the simulator's memory accounting (bound)",
    "belady": "clairvoyant MIN with bypass at the same GPU capacity, ignoring running requests' memory (offline bound)",
    "infinite": "unbounded cache (offline bound)",
}


def register(name: str, factory: Callable[..., Policy], description: str = "") -> None:
    _FACTORIES[name] = factory
    _DESCRIPTIONS[name] = description


def _ensure_builtin() -> None:
    if _FACTORIES:
        return
    from agentrt.policies.cachesage import CacheSagePolicy
    from agentrt.policies.kvflow import KVFlowPolicy
    from agentrt.policies.lru import LRUPolicy
    from agentrt.policies.pbkv import PBKVAggressivePolicy, PBKVHEPolicy, PBKVLAEPolicy, PBKVPolicy
    from agentrt.policies.pbkv_time import PBKVTimePolicy
    from agentrt.policies.ttl import TTLPolicy
    for cls in (LRUPolicy, CacheSagePolicy, KVFlowPolicy, TTLPolicy, PBKVLAEPolicy, PBKVHEPolicy,
                PBKVPolicy, PBKVAggressivePolicy, PBKVTimePolicy):
        register(cls.name, cls, cls.description)


def policy_names() -> list[str]:
    _ensure_builtin()
    return list(_FACTORIES) + list(BOUNDS)


def describe(name: str) -> str:
    _ensure_builtin()
    return _DESCRIPTIONS.get(name, "")


def check_names(names: list[str]) -> None:
    valid = policy_names()
    for n in names:
        if n not in valid:
            raise unknown_name("policy", n, valid)


def policy_class(name: str):
    """The class behind a policy name (None for the offline bounds)."""
    _ensure_builtin()
    f = _FACTORIES.get(name)
    return f if isinstance(f, type) else None


def make_policy(name: str, **options) -> Policy:
    _ensure_builtin()
    if name not in _FACTORIES:
        raise unknown_name("policy", name, policy_names())
    factory = _FACTORIES[name]
    try:
        return factory(**options)
    except TypeError as e:
        raise AgentrtError(f"bad option for policy '{name}': {e}") from None

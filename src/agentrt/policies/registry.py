"""Policies by name: every policy the CLI, the simulator, the vLLM connector and the server can run.

Three sources, merged on every look-up (built-ins first, in this order of precedence: a later one
replaces an earlier one of the same name):
1. the built-in policies, always present, loaded on the first look-up;
2. policy plugins: the `agentrt.policies` entry points of installed packages (entry point name =
   policy name, object = a `Policy` subclass or a factory returning one), discovered and loaded
   once, lazily, on the first look-up. A plugin that fails to load, or is no policy, is skipped
   with a `PolicyPluginWarning` naming its package; a plugin may not take a built-in's or a
   bound's name;
3. `register(name, factory)` calls, at any time (before or after the first look-up).

The mechanism (built-ins, plugins, registrations, options read from the constructor) is
`agentrt.registry.Registry`, shared with schedulers and routers.

The bounds are not policies an engine can run; they are listed here so that every tool accepts
the same names, and engines other than the simulator refuse them. `oracle` is a clairvoyant
eviction policy that `agentrt bench` runs inside the simulator (same memory accounting as every
policy: the reachable bound); `belady`, `belady-held` and `infinite` are offline bounds computed
from a replay's block-access stream (`belady` and `infinite` ignore the memory running requests
hold; `belady-held` keeps the blocks the replay's running calls held).
"""

from __future__ import annotations

from collections.abc import Callable

from agentrt.errors import AgentrtError, unknown_name
from agentrt.registry import Registry
from agentrt.runtime.policy import Policy

ENTRY_POINT_GROUP = "agentrt.policies"
BOUNDS = ("oracle", "belady", "belady-held", "infinite")
SIM_BOUNDS = ("oracle",)      # bounds that run in the simulator, with timings
# names a policy may not take: the bounds, and the keys `--set` gives the run's scheduler and router
RESERVED = (*BOUNDS, "scheduler", "router")
_BOUND_DESCRIPTIONS = {
    "oracle": "clairvoyant eviction, next use from the trace, under the simulator's memory accounting (bound)",
    "belady": "clairvoyant MIN with bypass at the same GPU capacity, ignoring running requests' memory (offline bound)",
    "belady-held": "clairvoyant MIN that keeps the blocks the LRU replay's running calls held (offline bound)",
    "infinite": "unbounded cache (offline bound)",
}


class PolicyPluginWarning(UserWarning):
    """A policy plugin (an `agentrt.policies` entry point) that was skipped, and why."""


def _builtins():
    from agentrt.policies.cachesage import CacheSagePolicy
    from agentrt.policies.kvflow import KVFlowPolicy
    from agentrt.policies.lru import LRUPolicy
    from agentrt.policies.pbkv import (PBKVAggressivePolicy, PBKVHEPolicy, PBKVLAEPolicy, PBKVPolicy,
                                       PBKVTimePolicy)
    from agentrt.policies.ttl import TTLPolicy
    return (LRUPolicy, CacheSagePolicy, KVFlowPolicy, TTLPolicy, PBKVLAEPolicy, PBKVHEPolicy,
            PBKVPolicy, PBKVAggressivePolicy, PBKVTimePolicy)


POLICIES = Registry("policy", _builtins, Policy, group=ENTRY_POINT_GROUP, reserved=lambda: RESERVED,
                    warning=PolicyPluginWarning)
_FACTORIES = POLICIES.registered               # the old name (tests pop what they registered)
reload_plugins = POLICIES.reload_plugins
policy_class = POLICIES.cls                     # None for the offline bounds and plain factories
unregister = POLICIES.unregister


def register(name: str, factory: Callable[..., Policy], description: str = "") -> None:
    """Make `factory` (a `Policy` subclass, or a callable taking keyword options, `seed` among
    them, and returning a policy) available as `name`, replacing any policy of that name. May be
    called at any time: the built-in policies and the plugins stay."""
    if name in BOUNDS:
        raise AgentrtError(f"'{name}' is the name of a bound; choose another policy name")
    POLICIES.register(name, factory, description)


def plugin_source(name: str) -> str | None:
    """Where a plugin policy comes from ("package 'x' (module:attr)"); None for other policies."""
    POLICIES.table()
    return POLICIES.plugin_sources.get(name) if name not in POLICIES.registered else None


def policy_names() -> list[str]:
    return POLICIES.names() + list(BOUNDS)


def describe(name: str) -> str:
    return POLICIES.describe(name) or _BOUND_DESCRIPTIONS.get(name, "")


def check_names(names: list[str]) -> None:
    valid = policy_names()
    for n in names:
        if n not in valid:
            raise unknown_name("policy", n, valid)


def make_policy(name: str, **options) -> Policy:
    """A fresh policy; a bad option value raises ValueError (the policy's own message) or
    `AgentrtError` (an unknown option, a non-bool flag, a value of the wrong type)."""
    table = POLICIES.table()
    if name not in table:
        raise unknown_name("policy", name, policy_names())
    POLICIES.check_options(name, options)
    try:
        return table[name][0](**options)
    except TypeError as e:
        given = ", ".join(f"{k}={v!r}" for k, v in options.items() if k != "seed")
        raise AgentrtError(f"bad option for policy '{name}': a value of the wrong type ({given}): {e}") from None

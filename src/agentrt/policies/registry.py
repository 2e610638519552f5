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

The bounds are not policies an engine can run; they are listed here so that every tool accepts
the same names, and engines other than the simulator refuse them. `oracle` is a clairvoyant
eviction policy that `agentrt bench` runs inside the simulator (same memory accounting as every
policy: the reachable bound); `belady`, `belady-held` and `infinite` are offline bounds computed
from a replay's block-access stream (`belady` and `infinite` ignore the memory running requests
hold; `belady-held` keeps the blocks the replay's running calls held).
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable

from agentrt.errors import AgentrtError, unknown_name
from agentrt.runtime.policy import Policy

ENTRY_POINT_GROUP = "agentrt.policies"
BOUNDS = ("oracle", "belady", "belady-held", "infinite")
SIM_BOUNDS = ("oracle",)      # bounds that run in the simulator, with timings

Entry = tuple[Callable[..., Policy], str]          # (factory, description)

_BUILTIN: dict[str, Entry] = {}
_PLUGINS: dict[str, Entry] = {}
_PLUGIN_SOURCES: dict[str, str] = {}                # plugin policy name -> "package (module:attr)"
_REGISTERED: dict[str, Entry] = {}
_FACTORIES = _REGISTERED                            # the old name (tests pop what they registered)
_loaded = {"builtin": False, "plugins": False}
_BOUND_DESCRIPTIONS = {
    "oracle": "clairvoyant eviction, next use from the trace, under the simulator's memory accounting (bound)",
    "belady": "clairvoyant MIN with bypass at the same GPU capacity, ignoring running requests' memory (offline bound)",
    "belady-held": "clairvoyant MIN that keeps the blocks the LRU replay's running calls held (offline bound)",
    "infinite": "unbounded cache (offline bound)",
}


class PolicyPluginWarning(UserWarning):
    """A policy plugin (an `agentrt.policies` entry point) that was skipped, and why."""


def register(name: str, factory: Callable[..., Policy], description: str = "") -> None:
    """Make `factory` (a `Policy` subclass, or a callable taking keyword options, `seed` among
    them, and returning a policy) available as `name`, replacing any policy of that name. May be
    called at any time: the built-in policies and the plugins stay."""
    if name in BOUNDS:
        raise AgentrtError(f"'{name}' is the name of a bound; choose another policy name")
    _REGISTERED[name] = (factory, description or getattr(factory, "description", "") or "")


def unregister(name: str) -> None:
    """Withdraw a policy `register` added (a built-in or plugin of that name shows again)."""
    _REGISTERED.pop(name, None)


def _ensure_builtin() -> None:
    if _loaded["builtin"]:
        return
    _loaded["builtin"] = True
    from agentrt.policies.cachesage import CacheSagePolicy
    from agentrt.policies.kvflow import KVFlowPolicy
    from agentrt.policies.lru import LRUPolicy
    from agentrt.policies.pbkv import PBKVAggressivePolicy, PBKVHEPolicy, PBKVLAEPolicy, PBKVPolicy
    from agentrt.policies.pbkv_time import PBKVTimePolicy
    from agentrt.policies.ttl import TTLPolicy
    for cls in (LRUPolicy, CacheSagePolicy, KVFlowPolicy, TTLPolicy, PBKVLAEPolicy, PBKVHEPolicy,
                PBKVPolicy, PBKVAggressivePolicy, PBKVTimePolicy):
        _BUILTIN[cls.name] = (cls, cls.description)


def _plugin_entry(obj) -> Entry | None:
    """(factory, description) of an entry point's object, or None if it is no policy."""
    if isinstance(obj, type):
        if not issubclass(obj, Policy):
            return None
        return obj, obj.description
    if not callable(obj):
        return None
    doc = (getattr(obj, "__doc__", None) or "").strip().splitlines()
    return obj, getattr(obj, "description", None) or (doc[0] if doc else "")


def _skip(name: str, source: str, why: str) -> None:
    warnings.warn(f"agentrt: policy plugin '{name}' from {source} skipped: {why}",
                  PolicyPluginWarning, stacklevel=3)


def _load_plugins() -> None:
    if _loaded["plugins"]:
        return
    _loaded["plugins"] = True
    from importlib.metadata import entry_points
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        dist = getattr(getattr(ep, "dist", None), "name", None)
        source = f"package '{dist}' ({ep.value})" if dist else f"'{ep.value}'"
        if ep.name in _PLUGINS:
            if _PLUGIN_SOURCES[ep.name] != source:
                _skip(ep.name, source, f"the name is taken by {_PLUGIN_SOURCES[ep.name]}")
            continue
        if ep.name in _BUILTIN or ep.name in BOUNDS:
            _skip(ep.name, source, "the name is a built-in policy's or a bound's")
            continue
        try:
            obj = ep.load()
        except Exception as e:  # noqa: BLE001 - a broken plugin must not break agentrt
            _skip(ep.name, source, f"it failed to load: {type(e).__name__}: {e}")
            continue
        entry = _plugin_entry(obj)
        if entry is None:
            _skip(ep.name, source, f"{ep.value} is not a Policy subclass or a factory of policies")
            continue
        _PLUGINS[ep.name] = entry
        _PLUGIN_SOURCES[ep.name] = source


def reload_plugins() -> None:
    """Forget the plugins found so far: the next look-up discovers the entry points again (after
    a package was installed into the running interpreter)."""
    _PLUGINS.clear()
    _PLUGIN_SOURCES.clear()
    _loaded["plugins"] = False
    importlib.invalidate_caches()


def _table() -> dict[str, Entry]:
    _ensure_builtin()
    _load_plugins()
    return {**_BUILTIN, **_PLUGINS, **_REGISTERED}


def plugin_source(name: str) -> str | None:
    """Where a plugin policy comes from ("package 'x' (module:attr)"); None for other policies."""
    _table()
    return _PLUGIN_SOURCES.get(name) if name not in _REGISTERED else None


def policy_names() -> list[str]:
    return list(_table()) + list(BOUNDS)


def describe(name: str) -> str:
    entry = _table().get(name)
    return entry[1] if entry is not None else _BOUND_DESCRIPTIONS.get(name, "")


def check_names(names: list[str]) -> None:
    valid = policy_names()
    for n in names:
        if n not in valid:
            raise unknown_name("policy", n, valid)


def policy_class(name: str):
    """The class behind a policy name (None for the offline bounds and for plain factories)."""
    entry = _table().get(name)
    f = entry[0] if entry is not None else None
    return f if isinstance(f, type) else None


def make_policy(name: str, **options) -> Policy:
    table = _table()
    if name not in table:
        raise unknown_name("policy", name, policy_names())
    factory = table[name][0]
    from agentrt.options import policy_flag_names, policy_option_names
    valid = policy_option_names(name)
    if valid is not None:
        unknown = sorted(set(options) - set(valid) - {"seed"})
        if unknown:
            raise AgentrtError(f"bad option for policy '{name}': no option {', '.join(map(repr, unknown))}; "
                               f"valid options: {', '.join(valid) or 'none'}")
    for opt in sorted(policy_flag_names(name) & options.keys()):
        if not isinstance(options[opt], bool):
            raise AgentrtError(f"bad option for policy '{name}': {opt} must be true or false, "
                               f"got {options[opt]!r}")
    try:
        return factory(**options)
    except TypeError as e:
        given = ", ".join(f"{k}={v!r}" for k, v in options.items() if k != "seed")
        raise AgentrtError(f"bad option for policy '{name}': a value of the wrong type ({given}): {e}") from None

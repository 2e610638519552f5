"""Routers by name: every router `agentrt bench --router` and `agentrt routers` know."""

from __future__ import annotations

from agentrt.cluster.agent import AgentRouter
from agentrt.cluster.baselines import LeastLoadedRouter, PrefixRouter, RoundRobinRouter, SessionRouter
from agentrt.cluster.routing import Router
from agentrt.errors import AgentrtError, unknown_name

DEFAULT_ROUTER = "agent"

_CLASSES: dict[str, type[Router]] = {
    c.name: c for c in (RoundRobinRouter, LeastLoadedRouter, PrefixRouter, SessionRouter, AgentRouter)}


def router_names() -> list[str]:
    return list(_CLASSES)


def describe_router(name: str) -> str:
    c = _CLASSES.get(name)
    return c.description if c is not None else ""


def router_class(name: str) -> type[Router]:
    check_router(name)
    return _CLASSES[name]


def check_router(name: str) -> None:
    if name not in _CLASSES:
        raise unknown_name("router", name, router_names())


def make_router(name: str, **options) -> Router:
    """A fresh router by name; options are its constructor's keywords (`seed` among them)."""
    check_router(name)
    try:
        return _CLASSES[name](**options)
    except (TypeError, ValueError) as e:
        raise AgentrtError(f"bad option for router '{name}': {e}") from None

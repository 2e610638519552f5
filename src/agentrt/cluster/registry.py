"""Routers by name: every router `agentrt bench --router` and `agentrt routers` know
(`agentrt.registry.Registry`, the mechanism policies and schedulers share)."""

from __future__ import annotations

from agentrt.cluster.routing import Router
from agentrt.registry import Registry

DEFAULT_ROUTER = "agent"


def _builtins():
    from agentrt.cluster.agent import AgentRouter
    from agentrt.cluster.baselines import LeastLoadedRouter, PrefixRouter, RoundRobinRouter, SessionRouter
    return (RoundRobinRouter, LeastLoadedRouter, PrefixRouter, SessionRouter, AgentRouter)


ROUTERS = Registry("router", _builtins, Router)
router_names = ROUTERS.names
describe_router = ROUTERS.describe
check_router = ROUTERS.check
make_router = ROUTERS.make     # a fresh router; options are its constructor's keywords (seed among them)


def router_class(name: str) -> type[Router]:
    check_router(name)
    return ROUTERS.cls(name)

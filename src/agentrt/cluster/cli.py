"""`agentrt routers`: the routers `bench --replicas N --router NAME` accepts, one per line.

`agentrt.cli` loads this module and calls `register_commands(app)`, as for the other commands
defined outside it.
"""

from __future__ import annotations

import typer


def routers() -> None:
    """List the routers `bench --router` accepts by name (a multi-replica simulation)."""
    from agentrt.cluster.registry import describe_router, router_names
    for n in router_names():
        typer.echo(f"{n:18s} {describe_router(n)}")


def register_commands(app: typer.Typer) -> None:
    app.command("routers")(routers)

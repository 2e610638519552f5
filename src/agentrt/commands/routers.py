"""`agentrt routers`: the routers `bench --replicas N --router NAME` accepts, one per line.

`agentrt.cli` loads this module and calls `register_commands(app)`, as for the other commands
defined outside it.
"""

from __future__ import annotations

import typer


def routers(options: bool = typer.Option(False, "--options", help="also list each router's options (--set router.OPTION=V) with defaults")) -> None:
    """List the routers `bench --router` accepts by name (a multi-replica simulation)."""
    from agentrt.cluster.registry import ROUTERS
    for line in ROUTERS.listing(options):
        typer.echo(line)


def register_commands(app: typer.Typer) -> None:
    app.command("routers")(routers)

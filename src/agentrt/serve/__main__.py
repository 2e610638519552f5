"""`python -m agentrt.serve ...`: the `agentrt serve` command on its own."""

from __future__ import annotations

import sys

import typer

from agentrt.errors import AgentrtError
from agentrt.serve.cli import serve


def main() -> None:
    try:
        typer.run(serve)
    except AgentrtError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()

"""`agentrt serve`: run the OpenAI-compatible runtime server in front of one vLLM server.

Registered into the main CLI through `register_commands(app)`; `python -m agentrt.serve` runs the
same command on its own. Importing this module is cheap: FastAPI, uvicorn and httpx are imported
only when the command runs, with a clear error when the `serve` extra is missing.
"""

from __future__ import annotations

import importlib.util
from typing import Optional

import typer

from agentrt.errors import AgentrtError
from agentrt.options import parse_value

SERVE_DEPS = ("fastapi", "uvicorn", "httpx", "prometheus_client")


def parse_options(items: list[str], policy: str) -> dict:
    """`--set option=value` (or `policy.option=value`) items -> policy keyword arguments."""
    out: dict = {}
    for item in items:
        key, eq, val = item.partition("=")
        if not eq or not key:
            raise AgentrtError(f"--set {item!r}: expected OPTION=VALUE")
        pol, dot, opt = key.rpartition(".")
        if dot and pol != policy:
            raise AgentrtError(f"--set {item!r}: names policy '{pol}' but --policy is '{policy}'")
        out[opt] = parse_value(val)
    return out


def serve(
    upstream: str = typer.Option(..., "--upstream", help="base URL of the vLLM OpenAI server, e.g. http://127.0.0.1:8001"),
    policy: str = typer.Option("lru", "--policy", help="policy name (see `agentrt policies`); lru sends no warm-ups"),
    host: str = typer.Option("127.0.0.1", "--host", help="address to listen on"),
    port: int = typer.Option(8000, "--port", help="port to listen on"),
    set_: list[str] = typer.Option([], "--set", help="policy option, e.g. --set warmup_min_prob=0.6 (repeatable)"),
    block_chars: int = typer.Option(256, "--block-chars", help="characters per prompt block for identity hashing"),
    act_interval: float = typer.Option(0.25, "--act-interval", help="seconds between the policy's act() calls when idle"),
    kv_capacity_tokens: Optional[int] = typer.Option(None, "--kv-capacity-tokens", help="the engine's KV pool in tokens (default: read from the upstream's /metrics)"),
    upstream_api_key: Optional[str] = typer.Option(None, "--upstream-api-key", envvar="AGENTRT_UPSTREAM_API_KEY", help="bearer token for the upstream when the client sends none"),
    log_level: str = typer.Option("info", "--log-level", help="uvicorn log level"),
) -> None:
    """Serve an OpenAI-compatible endpoint that forwards to vLLM with agent identity, runs the policy's warm-ups and exports Prometheus metrics."""
    missing = [m for m in SERVE_DEPS if importlib.util.find_spec(m) is None]
    if missing:
        raise AgentrtError(f"agentrt serve needs {', '.join(missing)}: pip install 'agentrt[serve]'")
    if not 0 < port < 65536:
        raise AgentrtError(f"--port must be in 1..65535, got {port}")
    import uvicorn

    from agentrt.serve.app import ServeConfig, create_app
    try:
        cfg = ServeConfig(upstream, policy, parse_options(set_, policy), block_chars=block_chars,
                          act_interval_s=act_interval, kv_capacity_tokens=kv_capacity_tokens,
                          upstream_api_key=upstream_api_key)
    except ValueError as e:
        raise AgentrtError(str(e)) from None
    app = create_app(cfg)
    uvicorn.run(app, host=host, port=port, log_level=log_level)


def register_commands(app: typer.Typer) -> None:
    app.command("serve")(serve)

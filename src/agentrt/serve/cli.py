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
from agentrt.checks import parse_value

SERVE_DEPS = ("fastapi", "uvicorn", "httptools", "httpx", "prometheus_client")


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
    upstream_api_key: Optional[str] = typer.Option(None, "--upstream-api-key", envvar="AGENTRT_UPSTREAM_API_KEY", help="bearer token sent to the upstream on every call (needs --auth)"),
    auth: Optional[str] = typer.Option(None, "--auth", help="API keys file (JSON or TOML: {\"tenants\": {KEY: TENANT}, \"admin_keys\": [KEY]}); the tenant comes from the key; required off loopback"),
    cache_salt_secret_file: Optional[str] = typer.Option(None, "--cache-salt-secret-file", help="secret for the per-tenant cache_salt (HMAC); default: $AGENTRT_CACHE_SALT_SECRET, else generated at start"),
    connect_timeout: float = typer.Option(10.0, "--connect-timeout", help="seconds to connect to the upstream"),
    read_timeout: float = typer.Option(300.0, "--read-timeout", help="longest silence (seconds) of the upstream within one answer before the call fails (504, or an SSE error event)"),
    scheduler: str = typer.Option("fcfs", "--scheduler", help="admission scheduler (see `agentrt schedulers`): not fcfs, calls wait in the server's admission gate and go to vLLM in the scheduler's order while the engine has room (fcfs: every call goes at once)"),
    max_wait: Optional[float] = typer.Option(None, "--max-wait", help="scheduler option max_wait_s: a call waiting longer goes before every call that has not"),
    max_hold: Optional[float] = typer.Option(None, "--max-hold", help="scheduler option max_hold_s: the longest a call is held at the door (agent, fair)"),
    max_held: int = typer.Option(1024, "--max-held", help="admission gate: calls held at once (429 with Retry-After past it)"),
    max_held_per_tenant: Optional[int] = typer.Option(None, "--max-held-per-tenant", help="admission gate: calls one tenant may have held (default: --max-held)"),
    gate_poll: float = typer.Option(0.05, "--gate-poll", help="admission gate: seconds between reads of vLLM's /metrics while calls are held"),
    max_queue: Optional[float] = typer.Option(None, "--max-queue", help="admission gate: the longest any call waits in it, seconds (default: max_hold + max_wait)"),
    max_running: Optional[int] = typer.Option(None, "--gate-max-running", help="admission gate: vLLM's --max-num-seqs (default: the preset file's, else unknown: vLLM's waiting queue tells)"),
    preset_file: Optional[str] = typer.Option(None, "--preset-file", help="admission gate: the engine's prefill times from `agentrt calibrate` (default: learned from the answers' time to first token)"),
    tenant_weights: Optional[str] = typer.Option(None, "--tenant-weights", help="fair scheduler: weights as TENANT:WEIGHT,..."),
    log_level: str = typer.Option("info", "--log-level", help="uvicorn log level"),
    forward_header: list[str] = typer.Option([], "--forward-header", help="a client header to forward upstream besides the allow-list (repeatable); headers vLLM acts on are refused"),
    max_body_bytes: int = typer.Option(32 << 20, "--max-body-bytes", help="largest request body (413 past it)"),
    max_header_bytes: int = typer.Option(32 << 10, "--max-header-bytes", help="largest request head: request line and headers (431 past it)"),
    header_timeout: float = typer.Option(10.0, "--header-timeout", help="seconds from connect (or a request's first byte) to its whole head (408 past it)"),
    body_timeout: float = typer.Option(60.0, "--body-timeout", help="seconds from a request's head to its whole body (408 past it)"),
    keepalive_timeout: float = typer.Option(5.0, "--keepalive-timeout", help="seconds an idle client connection stays open between requests"),
    max_connections: Optional[int] = typer.Option(None, "--max-connections", help="open client connections; past it the longest-idle one is closed (default: (open-file limit - 64) / 2, 16..4096)"),
    template_bytes_per_tenant: int = typer.Option(8 << 20, "--template-bytes-per-tenant", help="bytes of stored warm-up templates per tenant"),
    template_bytes: int = typer.Option(64 << 20, "--template-bytes", help="bytes of stored warm-up templates in all (the tenant holding most gives up first)"),
    retain_tool_calls: bool = typer.Option(False, "--retain-tool-calls", help="send vLLM's kv.retain for the context of each call that declares tools, for its agent's usual wait after a call (the expected tool time), so the agentrt connector keeps it while the tool runs (docs/serve.md)"),
    warmup_share: float = typer.Option(0.25, "--warmup-share", help="largest share of the last minute one tenant's warm-ups may keep the upstream busy"),
) -> None:
    """Serve an OpenAI-compatible endpoint that forwards to vLLM with agent identity, runs the policy's warm-ups and exports Prometheus metrics."""
    missing = [m for m in SERVE_DEPS if importlib.util.find_spec(m) is None]
    if missing:
        raise AgentrtError(f"agentrt serve needs {', '.join(missing)}: pip install 'agentrt[serve]'")
    if not 0 < port < 65536:
        raise AgentrtError(f"--port must be in 1..65535, got {port}")
    from agentrt.serve.app import ServeConfig, create_app
    from agentrt.serve.server import run
    from agentrt.serve.auth import AuthConfig, AuthError, Salts, is_loopback
    if auth is None and not is_loopback(host):
        raise AgentrtError(f"--host {host} is not a loopback address: --auth FILE is required "
                           "(without it every caller chooses its tenant and reads every tenant's state)")
    try:
        auth_cfg = AuthConfig.load(auth) if auth else None
        Salts.from_sources(cache_salt_secret_file)          # fail at start on a bad secret
    except AuthError as e:
        raise AgentrtError(str(e)) from None
    from agentrt.options import scheduler_options  # the same checks as `agentrt bench --scheduler`
    sopts = scheduler_options(scheduler, max_wait, tenant_weights, max_hold)
    if preset_file is not None:
        from agentrt.engine.preset_file import load_preset_file
        load_preset_file(preset_file)                       # a bad file fails at start
    try:
        cfg = ServeConfig(upstream, policy, parse_options(set_, policy), block_chars=block_chars,
                          act_interval_s=act_interval, kv_capacity_tokens=kv_capacity_tokens,
                          upstream_api_key=upstream_api_key, scheduler=scheduler,
                          scheduler_options=sopts, auth=auth_cfg,
                          cache_salt_secret_file=cache_salt_secret_file,
                          connect_timeout_s=connect_timeout, read_timeout_s=read_timeout,
                          forward_headers=tuple(forward_header), max_body_bytes=max_body_bytes,
                          max_header_bytes=max_header_bytes, header_timeout_s=header_timeout,
                          body_timeout_s=body_timeout, keepalive_timeout_s=keepalive_timeout,
                          max_connections=max_connections, template_bytes_per_tenant=template_bytes_per_tenant,
                          template_bytes=template_bytes, warmup_share=warmup_share,
                          retain_tool_calls=retain_tool_calls,
                          gate_max_held=max_held, gate_max_held_per_tenant=max_held_per_tenant,
                          gate_poll_s=gate_poll, gate_max_queue_s=max_queue, preset_file=preset_file,
                          gate_max_running=max_running)
    except ValueError as e:
        raise AgentrtError(str(e)) from None
    from agentrt.wire.priority import needs_priority
    if needs_priority(scheduler):
        typer.echo(f"scheduler {scheduler}: calls wait in the admission gate until vLLM has room; each "
                   "carries its vLLM priority (used to pick preemption victims when the upstream runs "
                   "--scheduling-policy priority; ignored under its default fcfs)", err=True)
    run(create_app(cfg), host, port, log_level)


def register_commands(app: typer.Typer) -> None:
    app.command("serve")(serve)

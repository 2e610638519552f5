"""The HTTP routes of `agentrt serve`: an OpenAI-compatible proxy in front of one vLLM server.

Routes: POST /v1/chat/completions and /v1/completions (the hot path, `proxy.py`: streaming
included, bytes and content encoding pass through as they come), GET /v1/models (the upstream's),
/health (the upstream's health), /metrics (Prometheus), and two of agentrt's own: GET
/agentrt/state (live workflows, agents, recent calls) and POST /agentrt/workflows/{id}/end (for
frameworks that learn a workflow ended only after its last call).
With `--auth` (`auth.py`): model routes need a tenant key, `/agentrt/state` and `/metrics` an
admin key; a tenant key may end its own workflows, an admin key any tenant's (`?tenant=`).
With a scheduler other than fcfs, calls wait in the admission gate (`gate.py`) until the engine
has room, in the scheduler's order (`scheduler.py`); the forwarded body's `priority` is the
scheduler's, whatever the client sent, and a client's `X-Vllm-Priority` header (which vLLM reads
before the body) is dropped: priorities are not the client's to choose.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from agentrt.serve import capacity
from agentrt.serve.answers import upstream_error
from agentrt.serve.auth import TENANT_RE, AuthConfig, Principal, Salts, default_unsalted, tenant_scoped
from agentrt.serve.headers import ForwardHeaders, check_forward_names
from agentrt.serve.metrics import CONTENT_TYPE_LATEST
from agentrt.serve.proxy import HotPath
from agentrt.serve.runtime_bridge import RuntimeBridge
from agentrt.serve.upstream import UpstreamPool
from agentrt.serve.validate import error_body

log = logging.getLogger("agentrt.serve")
DROP_RESPONSE = {"content-length", "content-encoding", "transfer-encoding", "connection", "keep-alive",
                 "date", "server"}
ERROR_TYPES = {401: "AuthenticationError", 403: "PermissionDeniedError", 404: "NotFoundError",
               405: "MethodNotAllowedError"}


@dataclass(slots=True)
class ServeConfig:
    upstream: str                            # e.g. http://127.0.0.1:8001 (a trailing /v1 is dropped)
    policy: str = "lru"
    policy_options: dict = field(default_factory=dict)
    block_chars: int = 256
    act_interval_s: float = 0.25
    kv_capacity_tokens: int | None = None    # None: read from the upstream's /metrics
    upstream_api_key: str | None = None      # sent upstream on every call; needs `auth`
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 300.0            # the longest silence of the upstream within one answer
    scheduler: str = "fcfs"                  # not fcfs: send its priorities (vLLM --scheduling-policy priority)
    scheduler_options: dict = field(default_factory=dict)
    auth: AuthConfig | None = None           # None: every caller is trusted (loopback only)
    cache_salt_secret_file: str | None = None
    max_body_bytes: int = 32 << 20
    forward_headers: tuple[str, ...] = ()    # header names forwarded beside the allow-list (headers.py)
    # the listening side (server.py): a client's request head, how long it may take, its body's time
    max_header_bytes: int = 32 << 10
    header_timeout_s: float = 10.0           # from connect (or the previous answer) to a whole head
    body_timeout_s: float = 60.0             # from the head to the whole body
    keepalive_timeout_s: float = 5.0         # an idle client connection between requests
    max_connections: int | None = None       # None: from the open-file limit (server.py)
    # stored warm-up templates (templates.py): bytes per tenant and in all
    template_bytes_per_tenant: int = 8 << 20
    template_bytes: int = 64 << 20
    warmup_share: float = 0.25               # of the last minute, the most one tenant's warm-ups take
    retain_tool_calls: bool = False          # send kv.retain with calls that may end in a tool call
    # the admission gate (a scheduler other than fcfs; gate.py)
    gate_max_held: int = 1024                # calls held at once (429 past it)
    gate_max_held_per_tenant: int | None = None   # None: gate_max_held
    gate_poll_s: float = 0.05                # vLLM /metrics scrape interval while calls are held
    gate_max_queue_s: float | None = None    # longest wait in the gate (None: max_hold_s + max_wait_s)
    gate_max_running: int | None = None      # vLLM's --max-num-seqs (None: the preset's, else unknown)
    preset_file: str | None = None           # `agentrt calibrate` preset: the engine's prefill times

    def __post_init__(self) -> None:
        u = self.upstream.rstrip("/")
        if not re.match(r"^https?://[^/]+", u):
            raise ValueError(f"--upstream must be an http(s) URL, got {self.upstream!r}")
        self.upstream = u[:-3] if u.endswith("/v1") else u
        if self.block_chars <= 0:
            raise ValueError(f"block_chars must be > 0, got {self.block_chars}")
        if self.act_interval_s <= 0:
            raise ValueError(f"act_interval_s must be > 0, got {self.act_interval_s}")
        if self.connect_timeout_s <= 0 or self.read_timeout_s <= 0:
            raise ValueError("connect and read timeouts must be > 0")
        for name in ("max_body_bytes", "max_header_bytes", "template_bytes_per_tenant", "template_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("header_timeout_s", "body_timeout_s", "keepalive_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.max_connections is not None and self.max_connections < 1:
            raise ValueError(f"max_connections must be >= 1, got {self.max_connections}")
        if self.gate_max_held < 1 or (self.gate_max_held_per_tenant is not None and self.gate_max_held_per_tenant < 1):
            raise ValueError("gate_max_held and gate_max_held_per_tenant must be >= 1")
        if self.gate_max_running is not None and self.gate_max_running < 1:
            raise ValueError(f"gate_max_running must be >= 1, got {self.gate_max_running}")
        if not 0 < self.gate_poll_s <= 10:
            raise ValueError(f"gate_poll_s must be in (0, 10] seconds, got {self.gate_poll_s}")
        if self.gate_max_queue_s is not None and not 0 < self.gate_max_queue_s < float("inf"):
            raise ValueError(f"gate_max_queue_s must be a finite number of seconds > 0, got {self.gate_max_queue_s}")
        if not 0 < self.warmup_share <= 1:
            raise ValueError(f"warmup_share must be in (0, 1], got {self.warmup_share}")
        self.forward_headers = check_forward_names(self.forward_headers)
        if self.upstream_api_key and self.auth is None:
            raise ValueError("--upstream-api-key needs --auth: without it every caller would reach the "
                             "upstream with the server's key")


def _upstream_headers(raw, cfg: ServeConfig, fwd: ForwardHeaders) -> dict:
    """The allow-listed client headers (`raw`: ASGI (name, value) pairs) plus the upstream key."""
    out = {k.decode("latin-1"): v.decode("latin-1") for k, v in fwd.pick(raw)}
    if cfg.upstream_api_key:
        out["authorization"] = f"Bearer {cfg.upstream_api_key}"
    return out


def _response_headers(resp: httpx.Response) -> dict:
    return {k: v for k, v in resp.headers.items() if k.lower() not in DROP_RESPONSE}


def _err(status: int, message: str) -> JSONResponse:
    return JSONResponse(error_body(message, ERROR_TYPES.get(status, "Error"), None, status), status_code=status)


def _measured(path: str | None):
    """(the cost model, the running cap) of a preset file (`agentrt calibrate`); Nones without one."""
    if path is None:
        return None, None
    from agentrt.engine.costs import CostModel
    from agentrt.engine.preset_file import load_preset_file
    pf = load_preset_file(path)
    return CostModel(pf.preset), pf.max_running


def create_app(cfg: ServeConfig, clock: Callable[[], float] = time.monotonic):
    """The ASGI app: the hot path (`proxy.HotPath`) in front of a FastAPI app for the other routes.
    `.state.bridge` and `.state.config` are reachable on the returned app as before."""
    cost, preset_running = _measured(cfg.preset_file)
    max_running = cfg.gate_max_running or preset_running
    bridge = RuntimeBridge(cfg.policy, cfg.policy_options, block_chars=cfg.block_chars,
                           kv_capacity_tokens=cfg.kv_capacity_tokens or 0,
                           act_interval_s=cfg.act_interval_s, clock=clock,
                           scheduler=cfg.scheduler, scheduler_options=cfg.scheduler_options,
                           known_tenants=len(set(cfg.auth.tenants.values())) if cfg.auth is not None else 0,
                           template_bytes_per_tenant=cfg.template_bytes_per_tenant,
                           template_bytes=cfg.template_bytes, warmup_share=cfg.warmup_share,
                           retain_tool_calls=cfg.retain_tool_calls,
                           gate_options={"max_held": cfg.gate_max_held, "poll_s": cfg.gate_poll_s,
                                         "max_held_per_tenant": cfg.gate_max_held_per_tenant,
                                         "max_queue_s": cfg.gate_max_queue_s, "max_running": max_running},
                           tenant_fair=cfg.auth is not None, prefill_cost=cost)
    salts = Salts.from_sources(cfg.cache_salt_secret_file)
    # without auth the default tenant stays unsalted: it shares the engine's cache with direct vLLM
    # clients, as before; every named tenant (and every tenant under auth) gets its own namespace
    bridge.salts = salts if cfg.auth is not None else default_unsalted(salts)
    state: dict = {}
    fwd = ForwardHeaders(cfg.auth is not None, bridge.scheduler.active, cfg.forward_headers)

    async def post_json(path: str, body: dict) -> tuple[int, dict | None]:
        r = await state["client"].post(path, json=body, headers=_upstream_headers((), cfg, fwd),
                                       timeout=min(cfg.read_timeout_s, 60.0))   # a warm-up never waits long
        try:
            return r.status_code, r.json()
        except ValueError:
            return r.status_code, None

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        timeout = httpx.Timeout(connect=cfg.connect_timeout_s, read=cfg.read_timeout_s, write=60.0, pool=None)
        client = state["client"] = httpx.AsyncClient(base_url=cfg.upstream, timeout=timeout)
        state["pool"] = UpstreamPool(cfg.upstream, cfg.connect_timeout_s, cfg.read_timeout_s)
        tasks = [bridge.acts.start(post_json)]
        if bridge.gate is not None:
            bridge.gate.attach(client)
        if cfg.kv_capacity_tokens is None:
            if not await capacity.read_into(bridge, client):
                log.warning("could not read the upstream's KV capacity; warm-up decisions assume "
                            "nothing stays cached until it can be read (tried again every 5 s)")
            tasks.append(asyncio.ensure_future(capacity.refresh_loop(bridge, client)))
        try:
            yield
        finally:
            for task in tasks:
                await bridge.acts.stop(task)
            if bridge.gate is not None:
                await bridge.gate.stop()
            await state["pool"].aclose()
            await client.aclose()

    app = FastAPI(title="agentrt serve", lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None)
    app.state.bridge = bridge
    app.state.config = cfg

    def caller(request: Request) -> Principal | None:
        if cfg.auth is None:
            return Principal(None, True)
        return cfg.auth.principal(request.headers.get("authorization", "").encode("latin-1"))

    def need_admin(request: Request) -> JSONResponse | None:
        who = caller(request)
        if who is None:
            return _err(401, "missing or unknown API key (Authorization: Bearer KEY)")
        return None if who.admin else _err(403, "this route needs an admin key")

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        msg = exc.detail if isinstance(exc.detail, str) else "error"
        if exc.status_code == 404:
            msg = f"no route {request.method} {request.url.path}"
        return JSONResponse(error_body(msg, ERROR_TYPES.get(exc.status_code, "Error"), None,
                                       exc.status_code), status_code=exc.status_code,
                            headers=getattr(exc, "headers", None))

    @app.get("/v1/models")
    async def models(request: Request):
        who = caller(request)
        if who is None:
            return _err(401, "missing or unknown API key (Authorization: Bearer KEY)")
        try:
            r = await state["client"].get("/v1/models", headers=_upstream_headers(request.headers.raw, cfg, fwd))
        except httpx.HTTPError as e:
            msg = upstream_error(cfg.upstream, cfg.auth is not None, "unreachable", repr(e), where=True)
            return JSONResponse(error_body(msg, "BadGatewayError", None, 502), status_code=502)
        return Response(r.content, status_code=r.status_code, headers=_response_headers(r))

    @app.get("/health")
    async def health():
        try:
            r = await state["client"].get("/health", timeout=5)
            code = r.status_code
        except httpx.HTTPError as e:
            code = f"unreachable: {e!r}"
        ok = code == 200
        if not ok:
            bridge.upstream_failed()
        out = {"status": "ok" if ok else "unhealthy", "upstream": cfg.upstream, "upstream_status": code,
               "policy": cfg.policy, "scheduler": cfg.scheduler}
        if cfg.auth is not None:          # no internal addresses or errors for anonymous callers
            out = {"status": out["status"], "policy": cfg.policy}
        return JSONResponse(out, status_code=200 if ok else 503)

    @app.get("/metrics")
    async def metrics(request: Request):
        if (denied := need_admin(request)) is not None:
            return denied
        return Response(bridge.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/agentrt/state")
    async def runtime_state(request: Request):
        if (denied := need_admin(request)) is not None:
            return denied
        return JSONResponse(bridge.state())

    @app.post("/agentrt/workflows/{workflow}/end")
    async def end_workflow(request: Request, workflow: str, tenant: str = "default"):
        who = caller(request)
        if who is None:
            return _err(401, "missing or unknown API key (Authorization: Bearer KEY)")
        if cfg.auth is not None and not who.admin:
            tenant = who.tenant           # a tenant key ends its own workflows only
        if not TENANT_RE.fullmatch(tenant) or not workflow.isprintable() or not 0 < len(workflow) <= 512:
            return JSONResponse(error_body("bad tenant or workflow id", "BadRequestError", "tenant", 400),
                                status_code=400)
        bridge.end_workflow(tenant_scoped(tenant, workflow), tenant)
        return JSONResponse({"workflow": workflow, "tenant": tenant, "ended": True})

    return _Wrapped(HotPath(app, cfg, bridge, state, cfg.auth, bridge.salts, fwd), app)


class _Wrapped:
    """The ASGI callable uvicorn runs; exposes the FastAPI app's `state` (bridge, config)."""

    def __init__(self, hot: HotPath, app: FastAPI) -> None:
        self.hot, self.fastapi, self.state = hot, app, app.state

    async def __call__(self, scope, receive, send):
        return await self.hot(scope, receive, send)

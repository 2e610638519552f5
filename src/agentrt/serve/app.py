"""The HTTP routes of `agentrt serve`: an OpenAI-compatible proxy in front of one vLLM server.

Routes: POST /v1/chat/completions and /v1/completions (streaming included: SSE bytes pass through
as they come), GET /v1/models (the upstream's), /health (the upstream's health), /metrics
(Prometheus), and two of agentrt's own: GET /agentrt/state (live workflows, agents, recent calls)
and POST /agentrt/workflows/{id}/end (for frameworks that learn a workflow ended only after its
last call). Requests are validated (validate.py), their identity resolved (identity.py) and given
to the runtime bridge, then forwarded with the identity attached; the upstream's status, body and
content type come back unchanged, errors included. An unreachable upstream gives 502.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from agentrt.serve.identity import forward_body, resolve_identity
from agentrt.serve.metrics import CONTENT_TYPE_LATEST
from agentrt.serve.runtime_bridge import Call, RuntimeBridge
from agentrt.serve.validate import RequestError, error_body, parse_body, validate_chat, validate_completion

log = logging.getLogger("agentrt.serve")
DROP_REQUEST = {"host", "content-length", "content-type", "connection", "keep-alive", "te", "upgrade",
                "transfer-encoding", "accept-encoding", "proxy-authorization", "proxy-connection"}
DROP_RESPONSE = {"content-length", "content-encoding", "transfer-encoding", "connection", "keep-alive",
                 "date", "server"}
ERROR_TYPES = {404: "NotFoundError", 405: "MethodNotAllowedError"}


@dataclass(slots=True)
class ServeConfig:
    upstream: str                            # e.g. http://127.0.0.1:8001 (a trailing /v1 is dropped)
    policy: str = "lru"
    policy_options: dict = field(default_factory=dict)
    block_chars: int = 256
    act_interval_s: float = 0.25
    kv_capacity_tokens: int | None = None    # None: read from the upstream's /metrics
    upstream_api_key: str | None = None
    connect_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        u = self.upstream.rstrip("/")
        if not re.match(r"^https?://[^/]+", u):
            raise ValueError(f"--upstream must be an http(s) URL, got {self.upstream!r}")
        self.upstream = u[:-3] if u.endswith("/v1") else u
        if self.block_chars <= 0:
            raise ValueError(f"block_chars must be > 0, got {self.block_chars}")
        if self.act_interval_s <= 0:
            raise ValueError(f"act_interval_s must be > 0, got {self.act_interval_s}")


def _upstream_headers(headers, api_key: str | None) -> dict:
    out = {k: v for k, v in headers.items() if k.lower() not in DROP_REQUEST}
    if api_key and not any(k.lower() == "authorization" for k in out):
        out["authorization"] = f"Bearer {api_key}"
    return out


def _response_headers(resp: httpx.Response) -> dict:
    return {k: v for k, v in resp.headers.items() if k.lower() not in DROP_RESPONSE}


def _usage_of(data: bytes) -> dict | None:
    try:
        obj = json.loads(data)
    except ValueError:
        return None
    u = obj.get("usage") if isinstance(obj, dict) else None
    return u if isinstance(u, dict) else None


async def kv_capacity_tokens(client: httpx.AsyncClient) -> int | None:
    """The upstream's KV pool in tokens, from vLLM's `vllm:cache_config_info` metric."""
    r = await client.get("/metrics", timeout=10)
    for line in r.text.splitlines():
        if line.startswith("vllm:cache_config_info{"):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
            if labels.get("kv_cache_size_tokens", "").isdigit():
                return int(labels["kv_cache_size_tokens"])
            if labels.get("num_gpu_blocks", "").isdigit() and labels.get("block_size", "").isdigit():
                return int(labels["num_gpu_blocks"]) * int(labels["block_size"])
    return None


def create_app(cfg: ServeConfig, clock: Callable[[], float] = time.monotonic) -> FastAPI:
    bridge = RuntimeBridge(cfg.policy, cfg.policy_options, block_chars=cfg.block_chars,
                           kv_capacity_tokens=cfg.kv_capacity_tokens or 0,
                           act_interval_s=cfg.act_interval_s, clock=clock)
    state: dict = {}

    async def post_json(path: str, body: dict) -> tuple[int, dict | None]:
        r = await state["client"].post(path, json=body, headers=_upstream_headers({}, cfg.upstream_api_key))
        try:
            return r.status_code, r.json()
        except ValueError:
            return r.status_code, None

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        timeout = httpx.Timeout(connect=cfg.connect_timeout_s, read=None, write=60.0, pool=None)
        limits = httpx.Limits(max_connections=1024, max_keepalive_connections=64)
        client = state["client"] = httpx.AsyncClient(base_url=cfg.upstream, timeout=timeout, limits=limits)
        if cfg.kv_capacity_tokens is None:
            try:
                bridge.cache.capacity_tokens = await kv_capacity_tokens(client) or 0
            except httpx.HTTPError as e:
                log.warning("could not read the upstream's KV capacity (%s); warm-up decisions "
                            "assume nothing stays cached", e)
        task = asyncio.create_task(bridge.run(post_json))
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            await client.aclose()

    app = FastAPI(title="agentrt serve", lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None)
    app.state.bridge = bridge
    app.state.config = cfg

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        msg = exc.detail if isinstance(exc.detail, str) else "error"
        if exc.status_code == 404:
            msg = f"no route {request.method} {request.url.path}"
        return JSONResponse(error_body(msg, ERROR_TYPES.get(exc.status_code, "Error"), None,
                                       exc.status_code), status_code=exc.status_code,
                            headers=getattr(exc, "headers", None))

    async def proxy(request: Request, path: str, validate) -> Response:
        try:
            body = parse_body(await request.body(), request.headers.get("content-type"))
            validate(body)
            ident = resolve_identity(request.headers, body, bridge.next_call_number())
        except RequestError as e:
            return JSONResponse(e.body(), status_code=e.status)
        call = bridge.arrive(path, body, ident)
        client: httpx.AsyncClient = state["client"]
        req = client.build_request("POST", path, json=forward_body(body, ident, call.agent, call.index),
                                   headers=_upstream_headers(request.headers, cfg.upstream_api_key))
        try:
            resp = await client.send(req, stream=True)
        except httpx.HTTPError as e:
            bridge.metrics.upstream_errors.labels(cfg.policy, "unreachable").inc()
            bridge.finish(call, "unreachable", None)
            return JSONResponse(error_body(f"upstream {cfg.upstream} unreachable: {e!r}",
                                           "BadGatewayError", None, 502), status_code=502)
        if resp.status_code >= 400:
            bridge.metrics.upstream_errors.labels(cfg.policy, str(resp.status_code)).inc()
        if resp.status_code == 200 and resp.headers.get("content-type", "").startswith("text/event-stream"):
            return StreamingResponse(_relay(resp, call), status_code=200, headers=_response_headers(resp))
        try:
            content = await resp.aread()
        except httpx.HTTPError as e:
            bridge.finish(call, "broken", None)
            return JSONResponse(error_body(f"upstream response broke off: {e!r}", "BadGatewayError",
                                           None, 502), status_code=502)
        finally:
            await resp.aclose()
        bridge.finish(call, resp.status_code, _usage_of(content) if resp.status_code == 200 else None)
        return Response(content, status_code=resp.status_code, headers=_response_headers(resp))

    async def _relay(resp: httpx.Response, call: Call):
        usage, tail, status = None, b"", 200
        try:
            async for chunk in resp.aiter_raw():
                yield chunk
                lines = (tail + chunk).split(b"\n")
                tail = lines.pop()
                for line in lines:
                    if line.startswith(b"data:") and b'"usage"' in line:
                        usage = _usage_of(line[5:]) or usage
        except httpx.HTTPError:
            status = "broken"
        finally:
            bridge.finish(call, status, usage)
            await resp.aclose()

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        return await proxy(request, "/v1/chat/completions", validate_chat)

    @app.post("/v1/completions")
    async def completions(request: Request):
        return await proxy(request, "/v1/completions", validate_completion)

    @app.get("/v1/models")
    async def models(request: Request):
        try:
            r = await state["client"].get("/v1/models",
                                          headers=_upstream_headers(request.headers, cfg.upstream_api_key))
        except httpx.HTTPError as e:
            return JSONResponse(error_body(f"upstream {cfg.upstream} unreachable: {e!r}",
                                           "BadGatewayError", None, 502), status_code=502)
        return Response(r.content, status_code=r.status_code, headers=_response_headers(r))

    @app.get("/health")
    async def health():
        try:
            r = await state["client"].get("/health", timeout=5)
            code = r.status_code
        except httpx.HTTPError as e:
            code = f"unreachable: {e!r}"
        ok = code == 200
        return JSONResponse({"status": "ok" if ok else "unhealthy", "upstream": cfg.upstream,
                             "upstream_status": code, "policy": cfg.policy},
                            status_code=200 if ok else 503)

    @app.get("/metrics")
    async def metrics():
        return Response(bridge.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/agentrt/state")
    async def runtime_state():
        return JSONResponse(bridge.state())

    @app.post("/agentrt/workflows/{workflow}/end")
    async def end_workflow(workflow: str, tenant: str = "default"):
        bridge.end_workflow(workflow, tenant)
        return JSONResponse({"workflow": workflow, "tenant": tenant, "ended": True})

    return app

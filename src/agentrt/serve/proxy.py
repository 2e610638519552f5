"""The hot path: `POST /v1/chat/completions` and `/v1/completions` as a bare ASGI handler.

Every other route goes to the FastAPI app behind it. Per request, in order:
1. headers: `Authorization`, content type, identity headers (each at most once: a repeated
   identity header of any convention (`serve/conventions.py`: `X-Workflow-Id`, `X-Session-ID`,
   `X-Dynamo-Session-ID`, ...) or `Authorization` is a 400, so identity and upstream can never
   disagree; values must be UTF-8),
   and the headers to forward: an allow-list (`headers.py`), so the upstream gets one
   `content-type` (the server's), no client `content-encoding` beside the body it re-encoded, and
   none of the headers vLLM acts on (`X-Request-Id`, `X-data-parallel-rank`, ...);
2. the caller (`auth.py`: 401 without a known key, 403 for an admin-only key), the body (at most
   `max_body_bytes`, else 413), validation and identity (`validate.py`, `identity.py`): 4xx in
   OpenAI's error shape, and nothing taken yet;
3. with a scheduler (`gate.py`): a 429 with `Retry-After` when the admission gate is full
   (before anything is taken: the call is not counted, nothing is sent); then `bridge.arrive`,
   then, whatever happens, exactly one `bridge.finish` (no slot can leak); a gated call waits
   for its release while a watcher removes it from the gate at once if its client disconnects;
4. the forwarded body: identity (`session_id`, kv_hints actions in `kv_transfer_params`,
   `vllm_xargs`: identity.py), the tenant's `cache_salt`, the scheduler's `priority` (with
   `--auth` a client's `priority` is dropped under fcfs too); sent through the pooled client
   (`upstream.py`) while a watcher aborts the upstream call if the client disconnects;
5. the answer: status, headers (content encoding included) and bytes as the upstream sent them. A
   stream that breaks (upstream died, read timeout) ends with an SSE `error` event and
   `data: [DONE]` (an encoded stream cannot take a plain event: its connection is cut instead).
   Unreachable: 502; connect or read timeout before the answer: 504. A copy of the answer is
   read for its `usage` and for whether it ends in a tool call (a choice finishing with
   `tool_calls` or `function_call`): the runtime's `CallFinished.tool_call`, so that `ttl` and
   `pbkv-ta` know a workflow now waits on a tool without the client saying so.
"""

from __future__ import annotations

import asyncio
import logging

import orjson

from agentrt.serve.answers import (TOOL_FINISH, body_decoder, error_response, inflate, read_answer, send_json,
                                   upstream_error)
from agentrt.serve.headers import ForwardHeaders
from agentrt.serve.identity import IDENTITY_HEADERS, forward_body, resolve_identity
from agentrt.serve.upstream import UpstreamError, UpstreamTimeout
from agentrt.serve.validate import RequestError, error_body, parse_body, validate_chat, validate_completion

log = logging.getLogger("agentrt.serve")
ROUTES = {"/v1/chat/completions": validate_chat, "/v1/completions": validate_completion}
IDENTITY = frozenset(h.encode() for h in IDENTITY_HEADERS)   # each at most once (identity.py)
RESPONSE_DROP = {b"content-length", b"transfer-encoding", b"connection", b"keep-alive", b"date", b"server"}
JSON_TYPE = [(b"content-type", b"application/json")]


class HotPath:
    def __init__(self, app, cfg, bridge, state: dict, auth=None, salts=None,
                 fwd: ForwardHeaders | None = None) -> None:
        self.app, self.cfg, self.bridge, self.state = app, cfg, bridge, state
        self.auth, self.salts = auth, salts
        self.fwd = fwd or ForwardHeaders(auth is not None, bridge.scheduler.active, cfg.forward_headers)
        self.upstream_auth = [(b"authorization", f"Bearer {cfg.upstream_api_key}".encode())] \
            if cfg.upstream_api_key else []

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["method"] == "POST" and scope["path"] in ROUTES:
            try:
                return await self.handle(scope, receive, send, scope["path"])
            except ConnectionAbortedError:   # an encoded stream broke: the connection is cut
                return
            except Exception:          # a bug; the request still gets a JSON answer if it can
                log.exception("agentrt serve: unexpected error on %s", scope["path"])
                st, body = error_response(500, "internal error in agentrt serve", "InternalServerError")
                try:
                    await send_json(send, st, body)
                except Exception:
                    pass
                return
        if scope["type"] == "http" and scope["path"] in ROUTES:
            return await send_json(send, *error_response(405, "Method Not Allowed", "MethodNotAllowedError"),
                                   [(b"allow", b"POST")])
        return await self.app(scope, receive, send)

    def _headers(self, scope):
        """(content type, authorization, identity dict, headers to forward) or a RequestError."""
        ident: dict = {}
        ctype = auth = None
        headers = scope["headers"]
        for k, v in headers:
            if k in IDENTITY:
                name = k.decode()
                if name in ident:
                    raise RequestError(f"header {name} is given more than once", name)
                try:
                    ident[name] = v.decode("utf-8")
                except UnicodeDecodeError:
                    raise RequestError(f"header {name} is not valid UTF-8", name) from None
                continue
            if k == b"authorization":
                if auth is not None:
                    raise RequestError("header authorization is given more than once", "authorization")
                auth = v
            elif k == b"content-type":
                ctype = v
        return ctype, auth, ident, self.fwd.pick(headers)

    async def _body(self, receive) -> bytes:
        parts, size, limit = [], 0, self.cfg.max_body_bytes
        while True:
            m = await receive()
            if m["type"] == "http.disconnect":
                raise ConnectionError("client left")
            chunk = m.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise RequestError(f"request body is larger than {limit} bytes", "body", 413,
                                   "PayloadTooLargeError")
            parts.append(chunk)
            if not m.get("more_body"):
                return parts[0] if len(parts) == 1 else b"".join(parts)

    async def handle(self, scope, receive, send, path: str) -> None:
        bridge, cfg = self.bridge, self.cfg
        try:
            ctype, authz, ihdr, fwd_headers = self._headers(scope)
            tenant = None
            if self.auth is not None:
                who = self.auth.principal(authz)
                if who is None:
                    return await send_json(send, *error_response(
                        401, "missing or unknown API key (Authorization: Bearer KEY)", "AuthenticationError"))
                if who.tenant is None:
                    return await send_json(send, *error_response(
                        403, "an admin key cannot make model calls", "PermissionDeniedError"))
                tenant = who.tenant
            body = parse_body(await self._body(receive), ctype.decode("latin-1") if ctype else None)
            ROUTES[path](body)
            ident = resolve_identity(ihdr, body, bridge.next_call_number(), tenant)
        except RequestError as e:
            return await send_json(send, e.status, orjson.dumps(e.body()))
        except ConnectionError:
            return
        gate = bridge.gate
        if gate is not None and not gate.room_for(ident.tenant):
            gate.metrics.rejected(ident.tenant)
            return await self._full(send, gate)
        call = bridge.arrive(path, body, ident)
        status, usage, tool = "error", None, False
        ctx = {"resp": None, "conn": None, "gone": False, "ticket": call.ticket}
        watcher = asyncio.ensure_future(self._watch(receive, ctx))
        resp = None
        try:
            if call.ticket is not None:
                why = await gate.wait(call.ticket)
                if why == "gone":              # the client left while held: nothing was sent
                    status = "gone"
                    return
                if why == "full":              # pushed out for a tenant holding fewer
                    status = 429
                    return await self._full(send, gate)
                if call.ticket.priority is not None:
                    call.priority = call.ticket.priority
            fwd = forward_body(body, ident, call.agent, call.index,
                               self.salts(ident.tenant) if self.salts else None)
            if call.priority is not None:
                fwd["priority"] = call.priority
            elif self.auth is not None:
                fwd.pop("priority", None)
            fwd_headers += JSON_TYPE
            fwd_headers += self.upstream_auth
            try:
                resp = ctx["resp"] = await self.state["pool"].request(
                    "POST", path, fwd_headers, orjson.dumps(fwd), on_conn=lambda c: _taken(ctx, c),
                    cancelled=lambda: ctx["gone"])
            except UpstreamTimeout as e:
                status = "timeout"
                bridge.metrics.upstream_errors.labels(cfg.policy, "timeout").inc()
                return await send_json(send, *error_response(504, str(e), "GatewayTimeoutError"))
            except UpstreamError as e:
                if ctx["gone"]:            # the client left: not the upstream's failure
                    status = "gone"
                    return
                status = "unreachable"
                bridge.metrics.upstream_errors.labels(cfg.policy, "unreachable").inc()
                bridge.upstream_failed()
                return await send_json(send, *error_response(
                    502, self._upstream_error("unreachable", e, where=True), "BadGatewayError"))
            if resp.status >= 400:
                bridge.metrics.upstream_errors.labels(cfg.policy, str(resp.status)).inc()
            headers = [(k, v) for k, v in resp.headers if k not in RESPONSE_DROP]
            ctype_up = resp.header(b"content-type") or b""
            dec = body_decoder(resp.header(b"content-encoding"))
            if resp.status == 200 and ctype_up.startswith(b"text/event-stream"):
                status = "broken"
                status, usage, tool = await self._relay(send, resp, headers, dec, ctx, call)
                return
            try:
                content = await resp.read()
            except UpstreamError as e:
                status = "gone" if ctx["gone"] else "broken"
                code, typ = (504, "GatewayTimeoutError") if isinstance(e, UpstreamTimeout) else (502, "BadGatewayError")
                return await send_json(send, *error_response(code, self._upstream_error("answer broke off", e), typ))
            status = resp.status
            if status == 200 and dec is not False:
                usage, tool = read_answer(content if dec is None else inflate(dec, content))
            headers.append((b"content-length", str(len(content)).encode()))
            await send({"type": "http.response.start", "status": resp.status, "headers": headers})
            await send({"type": "http.response.body", "body": content})
        finally:
            watcher.cancel()
            if resp is not None:
                resp.abort()                     # no-op once the answer was read to its end
            elif ctx["conn"] is not None:
                ctx["conn"].writer.transport.abort()    # failed or cancelled before an answer
            bridge.finish(call, status, usage, tool)

    async def _relay(self, send, resp, headers, dec, ctx, call=None) -> tuple:
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        usage, tail, tool, edge = None, b"", False, b""
        try:
            async for chunk in resp.chunks():
                if call is not None and not call.answering:
                    self.bridge.answering(call)      # past its prefill: warm-ups may go beside it
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
                if dec is False:
                    continue
                text = chunk if dec is None else inflate(dec, chunk)
                if not tool:     # `edge`: the last bytes of the previous chunk, for a split match
                    tool = TOOL_FINISH.search(edge + text) is not None
                    edge = text[-48:]
                if b'"usage"' in text or tail:
                    lines = (tail + text).split(b"\n")
                    tail = lines.pop()
                    for line in lines:
                        if line.startswith(b"data:") and b'"usage"' in line:
                            usage = read_answer(line[5:])[0] or usage
                    if len(tail) > 1 << 20:
                        tail = b""
        except UpstreamError as e:
            if ctx["gone"]:
                return "gone", usage, tool
            if dec is not None:                  # an encoded stream: cut it, never truncate silently
                raise ConnectionAbortedError("upstream stream broke off") from None
            code, typ = (504, "GatewayTimeoutError") if isinstance(e, UpstreamTimeout) else (502, "BadGatewayError")
            err = orjson.dumps(error_body(self._upstream_error("stream broke off", e), typ, None, code))
            await send({"type": "http.response.body", "body": b"data: " + err + b"\n\ndata: [DONE]\n\n",
                        "more_body": False})
            return "broken", usage, tool
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return 200, usage, tool

    @staticmethod
    async def _full(send, gate) -> None:
        await send_json(send, *error_response(
            429, "agentrt serve: the admission queue is full; retry after the time in Retry-After",
            "RateLimitError"), [(b"retry-after", str(gate.retry_after()).encode())])

    def _upstream_error(self, what: str, e: Exception, where: bool = False) -> str:
        return upstream_error(self.cfg.upstream, self.auth is not None, what, str(e), where,
                              isinstance(e, UpstreamTimeout))

    async def _watch(self, receive, ctx) -> None:
        """Abort the upstream call when the client disconnects (its answer would go nowhere)."""
        while True:
            m = await receive()
            if m["type"] == "http.disconnect":
                ctx["gone"] = True
                if ctx["ticket"] is not None:
                    self.bridge.gate.leave(ctx["ticket"])
                resp, conn = ctx["resp"], ctx["conn"]
                if resp is not None:
                    resp.abort()
                elif conn is not None:
                    conn.writer.transport.abort()
                return


def _taken(ctx: dict, conn) -> None:
    """The upstream pool took `conn` for this call: the watcher aborts it if the client leaves,
    and a client that already left gets it aborted at once."""
    ctx["conn"] = conn
    if ctx["gone"]:
        conn.writer.transport.abort()

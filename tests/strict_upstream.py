"""A strict upstream standing in for vLLM: aiohttp's server, whose HTTP parser refuses a repeated
Content-Type (and other singleton headers) and decodes a request's Content-Encoding, run on its
own loop in a thread. Shared by the serve tests of faulty upstreams.

The answer is chosen per request by the `X-Fake` header (serve forwards it when started with
`forward_headers=("x-fake", "x-hang")`): `json` (default); `rst-idle` (answer, then reset the
kept-alive connection 0.1 s later, while it sits idle in the client's pool); `drop` (read the
request, work `X-Hang` seconds, then reset the connection unanswered); `stream` (SSE events every
`X-Hang` seconds, 20 of them). GET /metrics gives vLLM's `cache_config_info` with `capacity`
tokens (404 while `capacity` is None); GET /health is 200. `port` may be given to restart an
upstream on the address of one that stopped.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import threading

from aiohttp import web

ANSWER = {"id": "x", "object": "chat.completion", "usage": {
    "prompt_tokens": 100, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 0}},
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}]}


def reset(transport) -> None:
    """Close with an RST (SO_LINGER 0), as a crashed or impatient server does."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


class StrictUpstream:
    def __init__(self, port: int = 0, capacity: int | None = None) -> None:
        self.requests: list[tuple[str, list[tuple[str, str]], dict | None]] = []
        self.refused: list[str] = []             # what its parser refused (400s it sent)
        self.capacity = capacity
        self.loop = asyncio.new_event_loop()
        started = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(port, started), daemon=True)
        self.thread.start()
        started.wait(10)
        self.url = f"http://127.0.0.1:{self.port}"

    def _run(self, port: int, started: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        app = web.Application(middlewares=[self._record_refusals])
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/completions", self._chat)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/health", self._health)
        self.runner = web.AppRunner(app, access_log=None)
        self.loop.run_until_complete(self.runner.setup())
        site = web.TCPSite(self.runner, "127.0.0.1", port, reuse_address=True)
        self.loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]
        started.set()
        self.loop.run_forever()

    @web.middleware
    async def _record_refusals(self, request, handler):
        try:
            return await handler(request)
        except web.HTTPException as e:
            self.refused.append(f"{e.status} {e.text}")
            raise

    def posts(self, mode: str | None = None) -> list:
        return [r for r in self.requests
                if mode is None or {k.lower(): v for k, v in r[1]}.get("x-fake", "json") == mode]

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except Exception as e:               # a body its content-encoding does not match
            self.refused.append(f"body: {e!r}")
            return web.json_response({"error": repr(e)}, status=400)
        self.requests.append((request.path, list(request.headers.items()), body))
        mode = request.headers.get("X-Fake", "json")
        hang = float(request.headers.get("X-Hang", "1"))
        if mode == "drop":
            await asyncio.sleep(hang)
            reset(request.transport)
            await asyncio.sleep(1)
        if mode == "rst-idle":
            self.loop.call_later(0.1, reset, request.transport)
        if mode == "stream":
            resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
            await resp.prepare(request)
            for i in range(20):
                await resp.write(b"data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": str(i)}}]}).encode() + b"\n\n")
                await asyncio.sleep(hang)
            await resp.write(b"data: [DONE]\n\n")
            return resp
        return web.json_response(ANSWER)

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _metrics(self, request: web.Request) -> web.Response:
        if self.capacity is None:
            return web.Response(status=404, text="no")
        return web.Response(text='vllm:cache_config_info{block_size="16",kv_cache_size_tokens="%d",'
                                 'num_gpu_blocks="%d"} 1.0\n' % (self.capacity, self.capacity // 16))

    def close(self) -> None:
        async def stop():
            await self.runner.cleanup()
        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

"""A real HTTP upstream standing in for vLLM, with faults on request, and `agentrt serve` under
uvicorn in a thread: shared by test_serve_tenancy.py and test_serve_faults.py.

The upstream's behaviour is chosen per request by the `X-Fake` header (serve, as `start_serve`
starts it, forwards `X-Fake` and `X-Hang`):
json (default), stream, break (two SSE events, then the connection is cut), gzip-stream,
gzip-json, hang (sleep `X-Hang` seconds before answering), stream-hang (one event, then sleep);
or a name in `answers` (name -> (JSON answer, SSE stream), chosen by the body's `stream`).
`GET /metrics` answers `metrics` (a vLLM exposition the test sets, `vllm_metrics`) when set.
"""

from __future__ import annotations

import gzip
import json
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

USAGE = {"prompt_tokens": 100, "completion_tokens": 2, "total_tokens": 102,
         "prompt_tokens_details": {"cached_tokens": 0}}
ANSWER = {"id": "x", "object": "chat.completion", "choices": [
    {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}], "usage": USAGE}
EVENTS = [{"choices": [{"index": 0, "delta": {"content": w}}]} for w in ("hel", "lo")] + \
    [{"choices": [], "usage": USAGE}]
SSE = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in EVENTS) + b"data: [DONE]\n\n"


class _Server(ThreadingHTTPServer):
    """Joins its handler threads on close, and stays quiet about clients that went away.

    The fault tests make clients disconnect mid-answer; a handler that then writes to the closed
    socket must not print a traceback to whatever stderr is at that moment (a later test's
    CliRunner captured one once). Any other handler error is still printed.
    """
    daemon_threads = False
    block_on_close = True

    def handle_error(self, request, client_address) -> None:
        if isinstance(sys.exc_info()[1], OSError):
            return
        super().handle_error(request, client_address)


class FakeUpstream:
    def __init__(self) -> None:
        self.requests: list[tuple[str, dict, dict]] = []
        self.answers: dict[str, tuple[bytes, bytes]] = {}
        self.stopping = threading.Event()    # wakes handlers told to hang, so close() can join them
        self.connections: set[socket.socket] = set()   # open client connections (keep-alive)
        self.metrics: str | None = None                 # GET /metrics answers this when set
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def setup(self):
                super().setup()
                outer.connections.add(self.connection)

            def finish(self):
                outer.connections.discard(self.connection)
                super().finish()

            def do_GET(self):
                if self.path == "/metrics" and outer.metrics is not None:
                    return self._send(200, outer.metrics.encode(), "text/plain; version=0.0.4")
                self._send(404, b'{"error": "no"}', "application/json")

            def _send(self, status, data, ctype, extra=()):
                self.send_response(status)
                self.send_header("content-type", ctype)
                self.send_header("content-length", str(len(data)))
                for k, v in extra:
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def _chunk(self, data: bytes):
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            def _start_stream(self, extra=()):
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("transfer-encoding", "chunked")
                for k, v in extra:
                    self.send_header(k, v)
                self.end_headers()

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                hdrs = {k.lower(): v for k, v in self.headers.items()}
                outer.requests.append((self.path, body, hdrs))
                mode = hdrs.get("x-fake", "json")
                if mode in outer.answers:
                    answer, sse = outer.answers[mode]
                    if not body.get("stream"):
                        return self._send(200, answer, "application/json")
                    self._start_stream()
                    for e in sse.split(b"\n\n")[:-1]:
                        self._chunk(e + b"\n\n")
                    self.wfile.write(b"0\r\n\r\n")
                    return
                if mode == "hang":
                    outer.stopping.wait(float(hdrs.get("x-hang", "5")))
                if mode in ("json", "hang"):
                    return self._send(200, json.dumps(ANSWER).encode(), "application/json")
                if mode == "gzip-json":
                    return self._send(200, gzip.compress(json.dumps(ANSWER).encode()), "application/json",
                                      [("content-encoding", "gzip")])
                if mode == "gzip-stream":
                    z = gzip.compress(SSE)
                    self._start_stream([("content-encoding", "gzip")])
                    self._chunk(z[:len(z) // 2])
                    self._chunk(z[len(z) // 2:])
                    self.wfile.write(b"0\r\n\r\n")
                    return
                self._start_stream()
                events = SSE.split(b"\n\n")[:-1]
                if mode == "stream":
                    for e in events:
                        self._chunk(e + b"\n\n")
                    self.wfile.write(b"0\r\n\r\n")
                elif mode == "break":
                    for e in events[:2]:
                        self._chunk(e + b"\n\n")
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                elif mode == "stream-hang":
                    self._chunk(events[0] + b"\n\n")
                    outer.stopping.wait(float(hdrs.get("x-hang", "5")))

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.stopping.set()
        self.server.shutdown()
        for c in list(self.connections):   # a kept-alive connection's handler waits on a read
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.server.server_close()    # joins every handler thread


def vllm_metrics(running: int = 0, waiting: int = 0, usage: float = 0.0, blocks: int = 0,
                 block_size: int = 32) -> str:
    """A vLLM /metrics exposition with the gauges the admission gate reads (one engine)."""
    lab = 'engine="0",model_name="m"'
    text = (f"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{{{lab}}} {float(running)}\n"
            f"vllm:num_requests_waiting{{{lab}}} {float(waiting)}\n"
            f"vllm:kv_cache_usage_perc{{{lab}}} {float(usage)}\n")
    if blocks:
        text += (f'vllm:cache_config_info{{block_size="{block_size}",num_gpu_blocks="{blocks}",'
                 f'engine="0"}} 1.0\n')
    return text


def start_serve(upstream_url: str, policy: str = "lru", **kw):
    """`agentrt serve` on 127.0.0.1 under uvicorn in a thread (real sockets, real disconnects)."""
    from agentrt.serve.app import ServeConfig, create_app
    from test_serve import ThreadServer
    kw.setdefault("kv_capacity_tokens", 100_000)
    kw.setdefault("act_interval_s", 60)
    kw.setdefault("forward_headers", ("x-fake", "x-hang"))     # the fakes' fault switches
    return ThreadServer(create_app(ServeConfig(upstream_url, policy, **kw))).start()


def wait_until(cond, timeout: float = 5.0) -> bool:
    t0 = time.time()
    while time.time() - t0 < timeout:
        if cond():
            return True
        time.sleep(0.02)
    return cond()


@pytest.fixture
def up():
    """A fake OpenAI upstream on 127.0.0.1, closed after the test (import it as a fixture)."""
    u = FakeUpstream()
    yield u
    u.close()

"""The fake OpenAI upstream `benchmarks/proxy.py` measures `agentrt serve` against: raw asyncio.

Every POST gets a small chat completion carrying `usage` (so serve's runtime sees cached tokens)
after `X-Delay-Ms` milliseconds; with `X-Stream-S` it streams one SSE event every 0.1 s for that
many seconds instead; a GET is a 404. It parses only what it needs (request line, the three
headers, the body's length) so that it costs next to nothing beside the server measured.
`python -m benchmarks.proxy --fake-upstream PORT` runs it in its own process.
"""

from __future__ import annotations

import asyncio
import time

import orjson

ANSWER = orjson.dumps({"id": "cmpl-1", "object": "chat.completion", "created": 1, "model": "m",
                       "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                                    "finish_reason": "stop"}],
                       "usage": {"prompt_tokens": 300, "completion_tokens": 1, "total_tokens": 301,
                                 "prompt_tokens_details": {"cached_tokens": 256}}})


class FakeUpstream(asyncio.Protocol):
    def connection_made(self, transport):
        self.t, self.buf = transport, b""

    def data_received(self, data):
        self.buf += data
        while True:
            head, sep, rest = self.buf.partition(b"\r\n\r\n")
            if not sep:
                return
            n, delay, stream_s = 0, 0.0, 0.0
            for line in head.split(b"\r\n")[1:]:
                k, _, v = line.partition(b":")
                k = k.strip().lower()
                if k == b"content-length":
                    n = int(v)
                elif k == b"x-delay-ms":
                    delay = float(v) / 1000
                elif k == b"x-stream-s":
                    stream_s = float(v)
            if len(rest) < n:
                return
            self.buf = rest[n:]
            if stream_s:
                self._send(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
                self._event(time.monotonic() + stream_s)
                continue
            status = b"404 Not Found" if head.startswith(b"GET") else b"200 OK"
            out = (b"HTTP/1.1 " + status + b"\r\ncontent-type: application/json\r\ncontent-length: "
                   + str(len(ANSWER)).encode() + b"\r\n\r\n" + ANSWER)
            if delay:
                asyncio.get_running_loop().call_later(delay, self._send, out)
            else:
                self._send(out)

    def _send(self, out):
        if not self.t.is_closing():
            self.t.write(out)

    def _event(self, until: float) -> None:
        """One SSE event every 0.1 s until `until`, then the end of the stream."""
        if time.monotonic() >= until:
            return self._send(b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n")
        ev = b'data: {"choices":[{"index":0,"delta":{"content":"x"}}]}\n\n'
        self._send(b"%x\r\n%s\r\n" % (len(ev), ev))
        asyncio.get_running_loop().call_later(0.1, self._event, until)


def run_upstream(port: int) -> None:
    async def main():
        srv = await asyncio.get_running_loop().create_server(FakeUpstream, "127.0.0.1", port, backlog=1024)
        await srv.serve_forever()
    asyncio.run(main())

"""Idle, slow and oversized clients: uvicorn's HTTP protocol (httptools) with the bounds it lacks.

What uvicorn offers, and where it stops (the raw-socket tests in
tests/test_serve_slow_clients.py fail under uvicorn's own configuration: idle and trickling
connections stay open, a 100 KB head is read and answered):
- `timeout_keep_alive` closes a connection idle between two requests (the server passes
  `keepalive_timeout_s`), but no timer runs before a connection's first byte, nor while a request
  head or body trickles in: such connections stayed open for good;
- `h11_max_incomplete_event_size` bounds a request head under the h11 parser only; the httptools
  parser (uvicorn's default when installed, several times faster) reads a 64 MB header whole;
- `limit_concurrency` answers 503 once that many connections are open, so idle connections would
  turn normal calls away instead of making room for them.
This protocol adds, per connection:
- head bytes: at most `max_header_bytes` from a request's first byte to the end of its head,
  else 431 and close (counted as bytes arrive, before the parser buffers them; a pipelined head
  that starts inside the previous request's last read is counted from the next read on);
- head time: from connect, and from each later request's first byte, to the end of its head at
  most `header_timeout_s`, else 408 and close;
- body time: from the end of the head to the end of the body at most `body_timeout_s`, else 408
  (when no answer started yet) and close; the app sees its client leave;
- open connections: at most `max_connections`. Past it one idle connection (no request in
  progress) is closed to make room: first the oldest of those that never sent a whole request
  head (idle or trickling since they connected), then the one kept alive longest since its last
  answer; only when every connection carries a request is the new one closed at once. So idle
  and trickling connections cannot lock callers out or run the process out of file descriptors,
  and a storm of fresh connections closes its own kind before a caller's kept-alive one.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from agentrt.serve.validate import error_body

REASONS = {408: b"Request Timeout", 431: b"Request Header Fields Too Large"}


@dataclass(slots=True, frozen=True)
class GuardLimits:
    max_header_bytes: int = 32 << 10
    header_timeout_s: float = 10.0
    body_timeout_s: float = 60.0
    max_connections: int = 1024


class ConnBook:
    """The open connections of one server; the idle ones in the order they went idle, those that
    never sent a whole request head (`fresh`) apart from those kept alive after an answer."""

    __slots__ = ("limit", "live", "fresh", "idle", "evicted")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.live: set = set()
        self.fresh: OrderedDict = OrderedDict()
        self.idle: OrderedDict = OrderedDict()
        self.evicted = 0                       # connections closed to make room (for tests)

    def opened(self, conn) -> bool:
        """Count a new connection; False: none could make room, close this one."""
        self.live.add(conn)
        self.fresh[conn] = None
        while len(self.live) > self.limit:
            victim = next(iter(self.fresh if len(self.fresh) > 1 or not self.idle else self.idle))
            self.closed(victim)
            self.evicted += 1
            if victim is conn:
                return False
            victim.transport.abort()
        return True

    def busy(self, conn) -> None:
        self.fresh.pop(conn, None)
        self.idle.pop(conn, None)

    def idle_again(self, conn) -> None:
        if conn in self.live:
            self.idle[conn] = None
            self.idle.move_to_end(conn)

    def closed(self, conn) -> None:
        self.live.discard(conn)
        self.fresh.pop(conn, None)
        self.idle.pop(conn, None)


def guarded_protocol(limits: GuardLimits) -> type:
    """A uvicorn HTTP protocol class enforcing `limits` (one `ConnBook` per class: per server)."""
    book = ConnBook(limits.max_connections)

    class GuardedHttpTools(HttpToolsProtocol):
        guard_book = book

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._head_bytes = 0
            self._in_head = True
            self._deadline: float | None = self.loop.time() + limits.header_timeout_s
            self._watch = None
            if not book.opened(self):
                transport.abort()
                return
            self._watch = self.loop.call_later(limits.header_timeout_s, self._check)

        def connection_lost(self, exc) -> None:
            if self._watch is not None:
                self._watch.cancel()
                self._watch = None
            book.closed(self)
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self._in_head:
                n = self._head_bytes + len(data)
                if n > limits.max_header_bytes and not self._head_ends_within(data):
                    return self._refuse(431, f"the request head is larger than {limits.max_header_bytes} "
                                             "bytes (--max-header-bytes)")
                self._head_bytes = n
            super().data_received(data)

        def _head_ends_within(self, data: bytes) -> bool:
            """Whether the head ends in `data` within the bound (the rest is body)."""
            end = data.find(b"\r\n\r\n")
            return end >= 0 and self._head_bytes + end + 4 <= limits.max_header_bytes

        # Each phase sets a deadline (a float: no timer per request); one watchdog timer per
        # connection checks it, re-armed for what is left.
        def on_message_begin(self) -> None:
            super().on_message_begin()
            if self._deadline is None:         # a later request on a kept-alive connection
                self._deadline = self.loop.time() + limits.header_timeout_s

        def on_headers_complete(self) -> None:
            self._in_head = False
            book.busy(self)
            self._deadline = self.loop.time() + limits.body_timeout_s
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            self._deadline = None
            self._in_head, self._head_bytes = True, 0
            super().on_message_complete()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                book.idle_again(self)

        def _check(self) -> None:
            self._watch = None
            if self.transport.is_closing():
                return
            now, deadline = self.loop.time(), self._deadline
            if deadline is not None and now >= deadline:
                return self._head_expired() if self._in_head else self._body_expired()
            wait = deadline - now if deadline is not None else limits.header_timeout_s
            self._watch = self.loop.call_later(wait, self._check)

        def _head_expired(self) -> None:
            self._refuse(408, f"the request head did not arrive within {limits.header_timeout_s:g} s "
                              "(--header-timeout)")

        def _body_expired(self) -> None:
            cycle = self.cycle
            if cycle is not None and not cycle.response_started:
                self._refuse(408, f"the request body did not arrive within {limits.body_timeout_s:g} s "
                                  "(--body-timeout)")
            else:
                self.transport.close()

        def _refuse(self, status: int, message: str) -> None:
            if self.transport.is_closing():
                return
            body = orjson.dumps(error_body(message, "RequestTimeoutError" if status == 408
                                           else "RequestHeaderFieldsTooLargeError", None, status))
            self.transport.write(b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
                                 b"connection: close\r\n\r\n" % (status, REASONS[status], len(body)) + body)
            self.transport.close()

    return GuardedHttpTools

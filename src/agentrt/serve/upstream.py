"""A small pooled HTTP/1.1 client for the upstream: the proxy's hot path, without httpx's costs.

Why not httpx: its connection pool scans every connection on each request (quadratic under 64
concurrent calls) and it decodes what a proxy must pass through. This client:
- keeps idle keep-alive connections in a LIFO stack (`max_idle`), at most `idle_s` each (below
  the upstream's own keep-alive timeout: vLLM's is 5 s), and opens new ones on demand (connect
  timeout `connect_s`). A pooled connection is checked before it is used (its transport, its
  reader, and a zero-timeout poll of its socket): one the upstream closed or reset while it sat
  idle is dropped, never written to;
- sends a request at most once unless it provably never reached the upstream: only a write that
  failed at once (the connection was found dead as the bytes were handed to it) is retried, once,
  on a fresh connection, and not for a caller whose client has left (`cancelled`). A connection
  that dies after the request was written, before any answer byte, is a plain `UpstreamError`:
  the upstream may be working on it (a POST generates; sending it again would generate twice);
- bounds every read by `read_s` (the time between bytes, not the whole answer), raising
  `UpstreamTimeout`;
- never decodes: bodies come back as the upstream sent them (chunked transfer decoded, content
  encoding kept), so `content-encoding` can be passed to the client with the same bytes;
- `Response.abort()` closes the connection at once (a client that left cancels a hung call:
  the pending read fails), and a connection whose answer was not read to the end is closed, never
  reused.
"""

from __future__ import annotations

import asyncio
import select
import ssl as _ssl
from urllib.parse import urlsplit


class UpstreamError(Exception):
    """The upstream could not be reached or broke off its answer."""


class UpstreamTimeout(UpstreamError):
    pass


class _NotSent(Exception):
    """Writing the request failed at once: not one byte of it can have reached the upstream."""


class _Conn:
    __slots__ = ("reader", "writer", "expired", "idle_since")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.expired = False
        self.idle_since = 0.0

    def expire(self) -> None:
        self.expired = True
        self.writer.transport.abort()

    async def timed(self, aw, seconds: float):
        """`await aw`, aborting the connection after `seconds` (cheaper than wait_for: one timer)."""
        h = asyncio.get_running_loop().call_later(seconds, self.expire)
        try:
            return await aw
        finally:
            h.cancel()

    def usable(self) -> bool:
        return not self.writer.is_closing() and not self.reader.at_eof() and self.reader.exception() is None

    def alive(self) -> bool:
        """Usable, and nothing waiting on its socket: an idle keep-alive connection has nothing
        to read, so a pending EOF, reset or stray byte means it must not carry a request."""
        if not self.usable():
            return False
        sock = self.writer.get_extra_info("socket")
        fd = sock.fileno() if sock is not None else -1
        if fd < 0:
            return True
        p = select.poll()                        # the fd is open: the transport is not closing
        p.register(fd, select.POLLIN | select.POLLPRI)
        return not p.poll(0)

    def close(self) -> None:
        self.writer.close()


class Response:
    """One upstream answer: `status`, `headers` (lower-case names, as sent), then the body."""

    __slots__ = ("status", "headers", "_conn", "_pool", "_length", "_chunked", "_keep", "_done")

    def __init__(self, pool: "UpstreamPool", conn: _Conn, status: int, headers: list) -> None:
        self.status, self.headers, self._pool, self._conn = status, headers, pool, conn
        self._length: int | None = None
        self._chunked = False
        self._keep = True
        self._done = False
        for k, v in headers:
            if k == b"content-length":
                try:
                    self._length = int(v)
                except ValueError:
                    raise UpstreamError(f"bad content-length from the upstream: {v[:40]!r}") from None
                if self._length < 0:
                    raise UpstreamError(f"bad content-length from the upstream: {v[:40]!r}")
            elif k == b"transfer-encoding":
                self._chunked = b"chunked" in v.lower()
            elif k == b"connection" and b"close" in v.lower():
                self._keep = False
        if self._chunked:
            self._length = None
        elif self._length is None:
            self._keep = False            # read to the end of the connection

    def header(self, name: bytes) -> bytes | None:
        for k, v in self.headers:
            if k == name:
                return v
        return None

    async def _read(self, coro):
        conn = self._conn
        if conn is None:
            coro.close()
            raise UpstreamError("the upstream call was aborted")
        try:
            data = await conn.timed(coro, self._pool.read_s)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as e:
            self.abort()
            if conn.expired:
                raise UpstreamTimeout(f"no data from the upstream for {self._pool.read_s:g} s") from None
            raise UpstreamError(f"the upstream broke off its answer: {e!r}") from None
        if conn.expired:
            self.abort()
            raise UpstreamTimeout(f"no data from the upstream for {self._pool.read_s:g} s")
        return data

    async def chunks(self):
        """The body in pieces as they arrive (transfer chunking removed, content encoding kept)."""
        r = self._conn.reader if self._conn is not None else None
        if r is None or self._done:
            return
        if self._length is not None:
            left = self._length
            while left > 0:
                data = await self._read(r.read(min(left, 1 << 16)))
                if not data:
                    self.abort()
                    raise UpstreamError("the upstream closed the connection mid-answer")
                left -= len(data)
                yield data
        elif self._chunked:
            while True:
                line = await self._read(r.readuntil(b"\r\n"))
                size = int(line.split(b";", 1)[0].strip(), 16)
                if size == 0:
                    while (await self._read(r.readuntil(b"\r\n"))) != b"\r\n":
                        pass                                   # trailers
                    break
                data = await self._read(r.readexactly(size + 2))
                yield data[:-2]
        else:
            while True:
                data = await self._read(r.read(1 << 16))
                if not data:
                    break
                yield data
        self._done = True
        self.release()

    async def read(self) -> bytes:
        return b"".join([c async for c in self.chunks()])

    def release(self) -> None:
        """Give the connection back (reused only if the answer was read to its end)."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if self._done and self._keep and conn.usable():
            self._pool._put(conn)
        else:
            conn.close()

    def abort(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.writer.transport.abort()


class UpstreamPool:
    def __init__(self, base_url: str, connect_s: float = 10.0, read_s: float = 300.0,
                 max_idle: int = 256, idle_s: float = 4.0) -> None:
        u = urlsplit(base_url)
        self.host = u.hostname or "127.0.0.1"
        self.tls = u.scheme == "https"
        self.port = u.port or (443 if self.tls else 80)
        self.host_header = (u.netloc or self.host).encode()
        self.connect_s, self.read_s, self.max_idle, self.idle_s = connect_s, read_s, max_idle, idle_s
        self._idle: list[_Conn] = []
        self._ssl = _ssl.create_default_context() if self.tls else None

    def _put(self, conn: _Conn) -> None:
        if len(self._idle) < self.max_idle:
            conn.idle_since = asyncio.get_running_loop().time()
            self._idle.append(conn)
        else:
            conn.close()

    def _pooled(self) -> _Conn | None:
        """The most recently pooled connection that is still good; dead or old ones are closed."""
        if not self._idle:
            return None
        oldest = asyncio.get_running_loop().time() - self.idle_s
        while self._idle:
            conn = self._idle.pop()
            if conn.idle_since >= oldest and conn.alive():
                return conn
            conn.writer.transport.abort()
        return None

    async def _connect(self) -> _Conn:
        try:
            r, w = await asyncio.wait_for(asyncio.open_connection(self.host, self.port, ssl=self._ssl,
                                                                  limit=1 << 20), self.connect_s)
        except asyncio.TimeoutError:
            raise UpstreamTimeout(f"connecting to the upstream took over {self.connect_s:g} s") from None
        except OSError as e:
            raise UpstreamError(f"upstream unreachable: {e!r}") from None
        return _Conn(r, w)

    async def request(self, method: str, path: str, headers: list, body: bytes = b"",
                      on_conn=None, cancelled=None) -> Response:
        """Send one request; `headers` are (name, value) byte pairs without host/length/connection.
        `on_conn(conn)` is told each connection used as soon as it is taken (to abort it);
        `cancelled()` says the caller no longer wants the answer (its client left): a request
        whose connection then fails is never sent again. Whatever goes wrong before the
        response is returned, its connection is closed."""
        head = [f"{method} {path} HTTP/1.1\r\n".encode(), b"host: ", self.host_header,
                b"\r\ncontent-length: ", str(len(body)).encode(), b"\r\n"]
        for k, v in headers:
            head += (k, b": ", v, b"\r\n")
        data = b"".join(head) + b"\r\n" + body
        for attempt in (0, 1):
            conn = self._pooled() if attempt == 0 else None
            if conn is None:
                conn = await self._connect()
            try:
                if on_conn is not None:
                    on_conn(conn)
                if cancelled is not None and cancelled():
                    raise UpstreamError("the client left before the call was sent")
                return await self._exchange(conn, method, data)
            except _NotSent as e:
                conn.writer.transport.abort()
                if attempt or (cancelled is not None and cancelled()):
                    raise UpstreamError(f"upstream unreachable: {e}") from None
                continue                             # never reached the upstream: once more
            except BaseException:
                conn.writer.transport.abort()        # cancelled, or a broken answer: never reused
                raise
        raise UpstreamError("upstream unreachable")        # not reached

    async def _exchange(self, conn: _Conn, method: str, data: bytes) -> Response:
        """Write the request and read the answer's head. `_NotSent` if the write failed at once
        (the request cannot have reached the upstream); any later failure is an `UpstreamError`
        (it may have: never sent again)."""
        transport = conn.writer.transport
        try:
            conn.writer.write(data)
        except (OSError, RuntimeError) as e:          # uvloop raises RuntimeError on a closed transport
            raise _NotSent(f"the connection was closed: {e!r}") from None
        if transport.is_closing():                    # the send failed as the bytes were handed over
            raise _NotSent("the connection was closed") from None
        try:
            line = await conn.timed(conn.reader.readuntil(b"\r\n\r\n"), self.read_s)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as e:
            transport.abort()
            if conn.expired:
                raise UpstreamTimeout(f"no answer from the upstream for {self.read_s:g} s") from None
            raise UpstreamError("the upstream closed the connection without answering (the call "
                                f"is not sent again: it may have reached the upstream): {e!r}") from None
        lines = line.split(b"\r\n")
        try:
            status = int(lines[0].split(b" ", 2)[1])
        except (IndexError, ValueError):
            raise UpstreamError(f"not an HTTP answer from the upstream: {lines[0][:80]!r}") from None
        hdrs = []
        for h in lines[1:]:
            k, sep, v = h.partition(b":")
            if sep:
                hdrs.append((k.strip().lower(), v.strip()))
        resp = Response(self, conn, status, hdrs)
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            resp._length, resp._chunked = 0, False
        return resp

    async def aclose(self) -> None:
        while self._idle:
            self._idle.pop().close()

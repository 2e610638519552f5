"""A small pooled HTTP/1.1 client for the upstream: the proxy's hot path, without httpx's costs.

Why not httpx: its connection pool scans every connection on each request (quadratic under 64
concurrent calls) and it decodes what a proxy must pass through. This client:
- keeps idle keep-alive connections in a LIFO stack (`max_idle`), opens new ones on demand
  (connect timeout `connect_s`), and retries a request once on a fresh connection when a reused
  one turns out to be closed before any byte of the answer came back (the keep-alive race),
  unless the caller's client has left meanwhile (`cancelled`): the call is then not sent again;
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
import ssl as _ssl
from urllib.parse import urlsplit


class UpstreamError(Exception):
    """The upstream could not be reached or broke off its answer."""


class UpstreamTimeout(UpstreamError):
    pass


class _Stale(Exception):
    """A reused keep-alive connection was closed by the upstream before it answered."""


class _Conn:
    __slots__ = ("reader", "writer", "expired")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.expired = False

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
        return not self.writer.is_closing() and not self.reader.at_eof()

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
                 max_idle: int = 256) -> None:
        u = urlsplit(base_url)
        self.host = u.hostname or "127.0.0.1"
        self.tls = u.scheme == "https"
        self.port = u.port or (443 if self.tls else 80)
        self.host_header = (u.netloc or self.host).encode()
        self.connect_s, self.read_s, self.max_idle = connect_s, read_s, max_idle
        self._idle: list[_Conn] = []
        self._ssl = _ssl.create_default_context() if self.tls else None

    def _put(self, conn: _Conn) -> None:
        if len(self._idle) < self.max_idle:
            self._idle.append(conn)
        else:
            conn.close()

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
            reused = bool(self._idle) and attempt == 0
            conn = self._idle.pop() if reused else await self._connect()
            try:
                if on_conn is not None:
                    on_conn(conn)
                if cancelled is not None and cancelled():
                    raise UpstreamError("the client left before the call was sent")
                return await self._exchange(conn, method, data, reused)
            except _Stale:
                if cancelled is not None and cancelled():
                    raise UpstreamError("the client left; the call was not sent again") from None
                continue                             # a stale keep-alive connection: once more
            except BaseException:
                conn.writer.transport.abort()        # cancelled, or a broken answer: never reused
                raise
        raise UpstreamError("upstream unreachable")        # not reached

    async def _exchange(self, conn: _Conn, method: str, data: bytes, reused: bool) -> Response:
        """Write the request and read the answer's head; `_Stale` if a reused connection turns
        out closed before any byte came back (the keep-alive race)."""
        try:
            conn.writer.write(data)
            line = await conn.timed(conn.reader.readuntil(b"\r\n\r\n"), self.read_s)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as e:
            conn.writer.transport.abort()
            if conn.expired:
                raise UpstreamTimeout(f"no answer from the upstream for {self.read_s:g} s") from None
            if reused and isinstance(e, (ConnectionError, asyncio.IncompleteReadError)) \
                    and not getattr(e, "partial", b""):
                raise _Stale() from None
            raise UpstreamError(f"upstream unreachable or broke off: {e!r}") from None
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

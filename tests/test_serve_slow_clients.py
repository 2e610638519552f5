"""`agentrt serve` against idle, trickling and oversized clients, with raw sockets (item 6 of
issue 42): what uvicorn alone left open (no timer before a connection's first byte or while a head
or body trickles in, no bound on a head under httptools, `limit_concurrency` turning callers away)
is bounded by the connection guard (`serve/conn_guard.py`), and normal calls keep working.
"""

from __future__ import annotations

import json
import socket
import time

import pytest

pytest.importorskip("fastapi", reason="the serve extra is not installed")
import httpx  # noqa: E402

from serve_fakes import start_serve, up, wait_until  # noqa: E402,F401  (up: a fixture)

CHAT = json.dumps({"model": "m", "messages": [{"role": "user", "content": "go"}]}).encode()


def connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    return s


def closed_by_server(s: socket.socket, within: float) -> bytes | None:
    """What the server sent before closing `s`, or None if it is still open after `within` s."""
    s.settimeout(within)
    data = b""
    try:
        while chunk := s.recv(65536):
            data += chunk
    except socket.timeout:
        return None
    except ConnectionResetError:
        pass
    return data


def head(body: bytes = CHAT, extra: bytes = b"") -> bytes:
    return (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n" + extra
            + f"content-length: {len(body)}\r\n\r\n".encode())


@pytest.fixture
def guarded(up):
    s = start_serve(up.url, "lru", header_timeout_s=1.0, body_timeout_s=1.0, max_header_bytes=4096,
                    max_connections=24)
    yield s
    s.stop()


def test_an_oversized_head_is_a_431_and_never_forwarded(guarded, up):
    s = connect(guarded.port)
    s.sendall(head(extra=b"x-big: " + b"a" * 100_000 + b"\r\n") + CHAT)
    got = closed_by_server(s, 5)
    assert got is not None and got.startswith(b"HTTP/1.1 431")
    assert "--max-header-bytes" in json.loads(got.partition(b"\r\n\r\n")[2])["error"]["message"]
    assert not up.requests
    # a head within the bound is fine, a body past it too (the bound is the head's)
    assert httpx.post(guarded.url + "/v1/chat/completions", content=CHAT + b" " * 8000,
                      headers={"content-type": "application/json", "x-pad": "p" * 3000}).status_code == 200


def test_idle_and_trickling_connections_are_closed(guarded):
    idle = [connect(guarded.port) for _ in range(5)]
    trickle = [connect(guarded.port) for _ in range(5)]
    t0 = time.monotonic()
    for i in range(4):                         # a byte of head each 0.4 s: never a whole head
        for s in trickle:
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nx-slow: " if i == 0 else b"a")
        time.sleep(0.4)
    for s in idle + trickle:
        got = closed_by_server(s, 3)
        assert got is not None, "a connection without a whole head stayed open"
        assert got == b"" or got.startswith(b"HTTP/1.1 408")
    assert time.monotonic() - t0 < 6


def test_a_trickling_body_is_cut_at_the_body_timeout(guarded, up):
    s = connect(guarded.port)
    s.sendall(head())
    s.sendall(CHAT[:10])                      # the rest never comes
    got = closed_by_server(s, 4)
    assert got is not None and got.startswith(b"HTTP/1.1 408")
    b = guarded.app.state.bridge
    assert wait_until(lambda: b.in_flight == 0, 3) and not up.requests


def test_idle_connections_make_room_for_callers(guarded, up):
    """More idle connections than `max_connections`: the longest idle are closed as new ones
    come, long before the head timeout would, a caller's kept-alive connection is not among
    them (connections that never sent a whole head go first), and normal calls get through."""
    book = guarded.server.config.http_protocol_class.guard_book
    with httpx.Client(base_url=guarded.url) as caller:
        assert caller.post("/v1/chat/completions", content=CHAT,
                           headers={"content-type": "application/json"}).status_code == 200
        assert wait_until(lambda: len(book.idle) == 1, 2)
        kept = next(iter(book.idle))
        idle = [connect(guarded.port) for _ in range(60)]
        assert wait_until(lambda: book.evicted >= 37, 3)
        assert len(book.live) <= 24 and kept in book.live
        assert caller.post("/v1/chat/completions", content=CHAT,
                           headers={"content-type": "application/json"}).status_code == 200
    assert httpx.post(guarded.url + "/v1/chat/completions", content=CHAT,
                      headers={"content-type": "application/json"}).status_code == 200
    for s in idle:
        s.close()


def test_a_kept_alive_connection_serves_several_calls(guarded):
    with httpx.Client(base_url=guarded.url) as c:
        for _ in range(3):
            assert c.post("/v1/chat/completions", content=CHAT,
                          headers={"content-type": "application/json"}).status_code == 200
            time.sleep(0.3)


def test_the_book_closes_fresh_connections_first_then_the_longest_kept_alive():
    from agentrt.serve.conn_guard import ConnBook

    class Conn:
        def __init__(self, name):
            self.name, self.aborted = name, False
            self.transport = self

        def abort(self):
            self.aborted = True
    book = ConnBook(3)
    a, b, c, d, e, f = (Conn(x) for x in "abcdef")
    for x in (a, b):
        assert book.opened(x)
        book.busy(x)                 # a whole head came: a request is in progress
    book.idle_again(a)               # a's answer went out: kept alive
    book.idle_again(b)
    assert book.opened(c)            # 3 open: nothing closed
    assert book.opened(d) and c.aborted and not (a.aborted or b.aborted)     # fresh c first
    book.busy(d)
    assert book.opened(e) and a.aborted and not b.aborted   # only e fresh: the longest kept alive
    book.busy(b)
    book.busy(e)
    assert not book.opened(f) and not any(x.aborted for x in (b, d, e))     # all busy: f itself
    assert book.evicted == 3 and book.live == {b, d, e}

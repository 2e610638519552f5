"""`agentrt serve` in front of a strict or faulty upstream (aiohttp's server, `strict_upstream.py`):
what the upstream receives (one Content-Type, no client Content-Encoding, none of the headers vLLM
acts on), keep-alive connections the upstream resets while idle, an upstream that drops a call
after working on it (never sent twice), and client disconnects kept apart from upstream errors.
"""

from __future__ import annotations

import concurrent.futures as cf
import socket
import time

import pytest

pytest.importorskip("fastapi", reason="the serve extra is not installed")
pytest.importorskip("aiohttp", reason="aiohttp (the strict upstream) is not installed")
import httpx  # noqa: E402

from serve_fakes import start_serve, up, wait_until  # noqa: E402,F401  (up: a fixture)
from strict_upstream import StrictUpstream  # noqa: E402

CHAT = {"model": "m", "messages": [{"role": "system", "content": "You plan. " * 30},
                                   {"role": "user", "content": "go"}]}
VLLM_ACTS_ON = {"X-Request-Id": "forged-id", "X-data-parallel-rank": "1",
                "endpoint-load-metrics-format": "text", "Cookie": "session=x"}


@pytest.fixture
def strict():
    u = StrictUpstream()
    yield u
    u.close()


@pytest.fixture
def srv(strict):
    s = start_serve(strict.url, "lru", read_timeout_s=10.0)
    yield s
    s.stop()


def post(srv, headers=None, **kw):
    return httpx.post(srv.url + "/v1/chat/completions", json=CHAT, headers=headers or {}, timeout=20, **kw)


def upstream_errors(srv) -> str:
    return "\n".join(line for line in httpx.get(srv.url + "/metrics").text.splitlines()
                     if line.startswith("agentrt_upstream_errors_total"))


def test_a_strict_upstream_serves_every_proxied_call(srv, strict):
    """Item 1: the client's Content-Type is not forwarded beside the server's own (aiohttp's
    parser refuses two); streaming and completions too."""
    assert post(srv).status_code == 200
    r = httpx.post(srv.url + "/v1/chat/completions", content=httpx.Request("POST", "/", json=CHAT).content,
                   headers={"content-type": "application/json; charset=utf-8"}, timeout=20)
    assert r.status_code == 200, r.text
    r = httpx.post(srv.url + "/v1/completions", json={"model": "m", "prompt": "hi"}, timeout=20)
    assert r.status_code == 200, r.text
    assert len(strict.requests) == 3 and not strict.refused
    for _, headers, _ in strict.requests:
        assert [k.lower() for k, _ in headers].count("content-type") == 1
        assert dict((k.lower(), v) for k, v in headers)["content-type"] == "application/json"


def test_a_client_content_encoding_never_reaches_the_upstream(srv, strict):
    """Item 2: the body the upstream gets is the server's own plain JSON; a client's
    `Content-Encoding: gzip` (the body was plain) must not go with it."""
    r = post(srv, {"Content-Encoding": "gzip"})
    assert r.status_code == 200, r.text
    assert not strict.refused
    assert all(k.lower() != "content-encoding" for k, _ in strict.requests[0][1])
    import gzip                                  # a body that is compressed is not JSON: a 400
    r = httpx.post(srv.url + "/v1/chat/completions", timeout=20,
                   content=gzip.compress(httpx.Request("POST", "/", json=CHAT).content),
                   headers={"content-type": "application/json", "content-encoding": "gzip"})
    assert r.status_code == 400 and len(strict.requests) == 1


@pytest.mark.parametrize("auth", [False, True])
def test_headers_vllm_acts_on_never_reach_it(strict, tmp_path, auth):
    """Item 7: an allow-list, under --auth too: X-Request-Id, X-data-parallel-rank,
    endpoint-load-metrics-format and Cookie stay with the server; Accept-Encoding, User-Agent
    and trace context go; an operator cannot add one of the withheld names."""
    from agentrt.serve.app import ServeConfig
    kw = {}
    headers = dict(VLLM_ACTS_ON, **{"traceparent": "00-abc-def-01", "X-Unknown": "1", "User-Agent": "t"})
    if auth:
        from agentrt.serve.auth import AuthConfig
        keys = tmp_path / "keys.json"
        keys.write_text('{"tenants": {"sk-team-a-0123456789": "team-a"}}')
        kw = {"auth": AuthConfig.load(keys), "upstream_api_key": "server-key"}
        headers["Authorization"] = "Bearer sk-team-a-0123456789"
    s = start_serve(strict.url, "lru", **kw)
    try:
        assert post(s, headers).status_code == 200
    finally:
        s.stop()
    got = {k.lower(): v for k, v in strict.requests[0][1]}
    for name in list(VLLM_ACTS_ON) + ["X-Unknown"]:
        assert name.lower() not in got, name
    assert got["traceparent"] == "00-abc-def-01" and got["user-agent"] == "t"
    if auth:
        assert got["authorization"] == "Bearer server-key"
    with pytest.raises(ValueError, match="--forward-header .X-Request-Id.: the server"):
        ServeConfig(strict.url, forward_headers=("X-Request-Id",))


def test_repeated_allowed_headers_go_once(srv, strict):
    body = httpx.Request("POST", "/", json=CHAT).content
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                  b"user-agent: a\r\nuser-agent: b\r\naccept-encoding: gzip\r\naccept-encoding: br\r\n"
                  + f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode() + body)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    assert data.startswith(b"HTTP/1.1 200"), data[:200]
    got = [(k.lower(), v) for k, v in strict.requests[0][1]]
    assert [v for k, v in got if k == "user-agent"] == ["a, b"]
    assert [v for k, v in got if k == "accept-encoding"] == ["gzip, br"]


def test_pooled_connections_reset_by_the_upstream_are_not_reused(srv, strict):
    """Item 3: the upstream resets idle keep-alive connections (RST); the next calls get fresh
    ones instead of a 500, and each call reaches the upstream once."""
    with cf.ThreadPoolExecutor(3) as ex:                   # three connections in the pool
        assert [r.status_code for r in ex.map(lambda _: post(srv, {"X-Fake": "rst-idle", "X-Hang": "0.5"}),
                                              range(3))] == [200] * 3
    time.sleep(0.5)                                        # the upstream has reset all three
    for _ in range(3):
        r = post(srv)
        assert r.status_code == 200, r.text
    assert len(strict.posts("json")) == 3
    assert "unreachable" not in upstream_errors(srv)


def test_a_call_the_upstream_drops_after_working_is_never_sent_twice(srv, strict):
    """Item 4: on a reused connection the upstream works 1 s, then resets it unanswered: the
    client gets a 502 and the call reached the upstream once (a retry would generate twice)."""
    assert post(srv).status_code == 200                    # pools a connection
    r = post(srv, {"X-Fake": "drop", "X-Hang": "1"})
    assert r.status_code == 502 and r.json()["error"]["type"] == "BadGatewayError"
    assert "not sent again" in r.json()["error"]["message"]
    time.sleep(0.5)
    assert len(strict.posts("drop")) == 1
    assert post(srv).status_code == 200                    # and the next call is fine


def test_a_client_that_leaves_is_no_upstream_error(up):
    """Item 5: a client disconnect is counted as `gone`, never in agentrt_upstream_errors_total
    (a tolerant upstream here, `serve_fakes.FakeUpstream`, that hangs on the call)."""
    s = start_serve(up.url, "lru", read_timeout_s=60)
    try:
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(s.url + "/v1/chat/completions", json=CHAT, headers={"X-Fake": "hang", "X-Hang": "3"},
                       timeout=0.5)
        b = s.app.state.bridge
        assert wait_until(lambda: b.in_flight == 0, 3)
        assert b.recent[-1]["status"] == "gone"
        assert upstream_errors(s) == ""
    finally:
        s.stop()


def test_kv_capacity_is_read_again_when_the_upstream_comes_back(monkeypatch):
    """Item 11: started while vLLM is down the capacity is unknown (0); it is read once vLLM is
    up, and read again after a restart with another pool (a failed call marks it stale)."""
    from agentrt.serve import capacity
    monkeypatch.setattr(capacity, "RETRY_S", 0.2)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    s = start_serve(f"http://127.0.0.1:{port}", "cachesage", kv_capacity_tokens=None, connect_timeout_s=1)
    b = s.app.state.bridge
    u = None
    try:
        assert b.cache.capacity_tokens == 0
        u = StrictUpstream(port, capacity=4096)
        assert wait_until(lambda: b.cache.capacity_tokens == 4096, 5)
        u.close()
        assert post(s).status_code == 502 and b.capacity_stale
        u = StrictUpstream(port, capacity=8192)               # restarted with another pool
        assert wait_until(lambda: b.cache.capacity_tokens == 8192, 5)
        assert post(s).status_code == 200
    finally:
        s.stop()
        if u is not None:
            u.close()

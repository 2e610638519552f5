"""`agentrt serve` under bad input and a failing upstream (a real local HTTP upstream, uvicorn in a
thread): every bad request is a 4xx in OpenAI's error shape, nothing leaks (in-flight count back
to 0, warm-ups still run), broken streams end with an SSE error event, timeouts fire, a client
that leaves cancels its upstream call, and content encodings pass through.
"""

from __future__ import annotations

import asyncio
import json
import socket

import pytest

pytest.importorskip("fastapi", reason="the serve extra is not installed")
import httpx  # noqa: E402

from serve_fakes import up, SSE, FakeUpstream, start_serve, wait_until  # noqa: E402

CHAT = {"model": "m", "messages": [{"role": "system", "content": "You plan. " * 30},
                                   {"role": "user", "content": "go"}]}


@pytest.fixture
def srv(up):
    s = start_serve(up.url, "cachesage", read_timeout_s=2.0)     # under 3 s, the fakes' hang; over a loaded machine's stall
    yield s
    s.stop()


def raw_post(port: int, headers: list[bytes], body: bytes) -> tuple[int, bytes]:
    """A request with exactly these header bytes (httpx would normalise them)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                  + b"".join(h + b"\r\n" for h in headers)
                  + f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode() + body)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), rest


BAD_BODIES = [
    b'{"model": "m", "messages": [{"role": "user", "content": "x"}], "temperature": NaN}',
    b'{"model": "m", "messages": [{"role": "user", "content": "x"}], "top_p": Infinity}',
    b'{"model": "m", "messages": [{"role": "user", "content": "\\ud800"}]}',
    b'{"model": "m", "messages": [{"role": "user", "content": "x"}], "metadata": {"agent_id": "\\udfff"}}',
    b'{"model": "m", "messages": [{"role": "user", "content": "x"}], "metadata": {"agent_id": "a\\u0000b"}}',
    b'{"model": "m", "messages": [{"role": "user", "content": "\xff\xfe"}]}',
    b'{"model": "m", "messages": [{"role": "user", "content": "x"}], "n": 1e999}',
    b'{"model": "m", "messages": ' + b"[" * 3000 + b"]" * 3000 + b"}",
]
BAD_HEADERS = [
    [b"x-agent-id: \xd0\xbf\xd0\xbb\xd0\xb0\xd0\xbd"],           # UTF-8 bytes: allowed, see below
    [b"x-agent-id: \xff\xfe"],                                  # not UTF-8
    [b"x-agent-id: a", b"x-agent-id: b"],
    [b"x-workflow-id: w1", b"x-workflow-id: w2"],
    [b"x-workflow-end: true", b"x-workflow-end: false"],
    [b"x-tenant-id: a", b"x-tenant-id: b"],
    [b"x-tenant-id: not/a/tenant"],
]


def assert_clean(srv) -> None:
    b = srv.app.state.bridge
    assert wait_until(lambda: b.in_flight == 0, 3), f"in-flight slot leaked: {b.in_flight}"
    assert not b.acts.warming


def test_bad_bodies_are_400s_and_leak_nothing(srv, up):
    for body in BAD_BODIES:
        status, data = raw_post(srv.port, [], body)
        assert status == 400, (body[:80], data)
        err = json.loads(data)["error"]
        assert set(err) == {"message", "type", "param", "code"} and err["code"] == 400
    assert not up.requests
    assert_clean(srv)


def test_bad_and_duplicate_identity_headers(srv, up):
    results = [raw_post(srv.port, h, json.dumps(CHAT).encode()) for h in BAD_HEADERS]
    assert results[0][0] == 200                                 # a UTF-8 agent name is fine
    assert up.requests[0][1]["vllm_xargs"]["agentrt_agent"] == "план"
    for (status, data), h in zip(results[1:], BAD_HEADERS[1:]):
        assert status == 400, (h, data)
        assert json.loads(data)["error"]["param"] in ("x-agent-id", "x-workflow-id", "x-workflow-end",
                                                      "x-tenant-id")
    assert len(up.requests) == 1
    assert_clean(srv)


def test_too_large_and_wrong_type_bodies(up):
    s = start_serve(up.url, "lru", max_body_bytes=1000)
    try:
        status, data = raw_post(s.port, [], json.dumps({**CHAT, "pad": "x" * 2000}).encode())
        assert status == 413 and json.loads(data)["error"]["code"] == 413
        assert_clean(s)
    finally:
        s.stop()


def test_warmups_still_run_after_bad_requests(srv):
    for body in BAD_BODIES[:5]:
        raw_post(srv.port, [], body)
    bridge = srv.app.state.bridge
    sent = []

    async def post(path, body):
        sent.append(body)
        return 200, {"usage": {"prompt_tokens": 5, "prompt_tokens_details": {"cached_tokens": 0}}}
    for wf in ("w1", "w2", "w3"):               # A then B, twice; then A: B is predicted next
        for agent, sys_ in (("A", "plan " * 40), ("B", "code " * 80)):
            if wf == "w3" and agent == "B":
                break
            r = httpx.post(srv.url + "/v1/chat/completions", timeout=10,
                           json={"model": "m", "messages": [{"role": "system", "content": sys_},
                                                            {"role": "user", "content": wf}]},
                           headers={"X-Agent-Id": agent, "X-Workflow-Id": wf,
                                    "X-Workflow-End": str(agent == "B").lower()})
            assert r.status_code == 200
    bridge.cache.capacity_tokens = 0
    bridge.cache.add_work(10)
    assert bridge.in_flight == 0
    assert asyncio.run(bridge.acts.act_once(post)) == 1 and sent[0]["vllm_xargs"]["agentrt_agent"] == "B"


def test_a_stream_cut_by_the_upstream_ends_with_an_error_event(srv):
    with httpx.stream("POST", srv.url + "/v1/chat/completions", json={**CHAT, "stream": True},
                      headers={"X-Fake": "break"}, timeout=10) as r:
        assert r.status_code == 200
        text = b"".join(r.iter_bytes()).decode()
    events = [e for e in text.split("\n\n") if e]
    assert events[-1] == "data: [DONE]"
    err = json.loads(events[-2][len("data: "):])["error"]
    assert err["type"] == "BadGatewayError" and "broke off" in err["message"]
    assert_clean(srv)
    assert srv.app.state.bridge.recent[-1]["status"] == "broken"


@pytest.mark.slow
def test_read_timeouts_give_504_or_an_error_event(srv):
    r = httpx.post(srv.url + "/v1/chat/completions", json=CHAT, timeout=10,
                   headers={"X-Fake": "hang", "X-Hang": "3"})
    assert r.status_code == 504 and r.json()["error"]["type"] == "GatewayTimeoutError"
    with httpx.stream("POST", srv.url + "/v1/chat/completions", json={**CHAT, "stream": True}, timeout=10,
                      headers={"X-Fake": "stream-hang", "X-Hang": "3"}) as r:
        text = b"".join(r.iter_bytes()).decode()
    assert '"GatewayTimeoutError"' in text and text.endswith("data: [DONE]\n\n")
    assert_clean(srv)


def test_a_client_that_leaves_cancels_its_upstream_call(up):
    s = start_serve(up.url, "lru", read_timeout_s=60)
    try:
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(s.url + "/v1/chat/completions", json=CHAT, timeout=0.5,
                       headers={"X-Fake": "hang", "X-Hang": "30"})
        assert_clean(s)                           # long before the upstream's 30 s
        assert s.app.state.bridge.recent[-1]["status"] == "gone"
    finally:
        s.stop()


def test_unreachable_upstream_is_a_502_and_leaks_nothing():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    s = start_serve(f"http://127.0.0.1:{port}", "cachesage", connect_timeout_s=1)
    try:
        for stream in (False, True):
            r = httpx.post(s.url + "/v1/chat/completions", json={**CHAT, "stream": stream}, timeout=10)
            assert r.status_code == 502 and r.json()["error"]["type"] == "BadGatewayError"
        assert_clean(s)
    finally:
        s.stop()


@pytest.mark.parametrize("stream", [False, True])
def test_gzip_answers_pass_through_with_their_encoding(srv, stream):
    mode = "gzip-stream" if stream else "gzip-json"
    body = {**CHAT, "stream": stream}
    r = httpx.post(srv.url + "/v1/chat/completions", json=body, headers={"X-Fake": mode}, timeout=10)
    assert r.status_code == 200 and r.headers["content-encoding"] == "gzip"
    if stream:
        assert r.content == SSE                  # httpx decoded the gzip the upstream sent
    else:
        assert r.json()["choices"][0]["message"]["content"] == "ok"
    # usage read from the gzip (the server counts it once the answer is sent: wait for it)
    assert wait_until(lambda: srv.app.state.bridge.metrics.totals()["prompt_tokens"] >= 100, 3)
    assert_clean(srv)


TOOL_ANSWER = {"id": "x", "object": "chat.completion", "usage": {"prompt_tokens": 100, "completion_tokens": 5},
               "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                   "role": "assistant", "content": None, "tool_calls": [
                       {"id": "c1", "type": "function", "function": {"name": "run_tests", "arguments": "{}"}}]}}]}


@pytest.mark.parametrize("stream", [False, True])
def test_an_answer_ending_in_a_tool_call_reaches_the_runtime(stream):
    """The runtime sees `tool_call` from the answer alone: `ttl` pins the agent's thread while
    its tool runs; a plain answer pins nothing."""
    u = FakeUpstream()
    events = [{"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "c1", "type": "function",
                                                                   "function": {"name": "run_tests"}}]}}]},
              {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}]
    sse = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"
    u.answers["tool"] = (json.dumps(TOOL_ANSWER).encode(), sse)
    s = start_serve(u.url, "ttl")
    try:
        b = s.app.state.bridge
        for mode in ("json", "tool"):
            r = httpx.post(s.url + "/v1/chat/completions", json={**CHAT, "stream": stream},
                           headers={"X-Fake": mode, "X-Workflow-Id": f"w-{mode}", "X-Agent-Id": "coder"}, timeout=10)
            assert r.status_code == 200
            assert wait_until(lambda: b.in_flight == 0, 3)
        assert [c["tool_call"] for c in list(b.recent)[-2:]] == [False, True]
        assert b.runtime.policy.pins == 1
        assert 'agentrt_tool_calls_total{agent="coder",policy="ttl",tenant="default"} 1.0' in httpx.get(s.url + "/metrics").text
        assert b.runtime.workflows[("default", "w-tool")].threads["coder"].pinned_until > 0
    finally:
        s.stop()
        u.close()


def test_a_tool_call_finish_split_across_stream_chunks_is_found():
    from agentrt.serve.proxy import HotPath
    data = b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}\n\ndata: [DONE]\n\n'
    cut = data.index(b"tool_calls") + 3

    class Resp:
        async def chunks(self):
            for part in (data[:cut], data[cut:]):
                yield part

    sent = []

    async def send(m):
        sent.append(m)
    status, usage, tool = asyncio.run(HotPath._relay(None, send, Resp(), [], None, {"gone": False}))
    assert (status, usage, tool) == (200, None, True)
    assert b"".join(m.get("body", b"") for m in sent) == data

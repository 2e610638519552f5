"""The admission gate over real sockets: `agentrt serve --scheduler` in front of a fake vLLM whose
`/metrics` the test sets (serve_fakes.py): held calls wait for room the scrape shows, a full
gate answers 429 with Retry-After and sends nothing, a client that leaves while held is removed
at once, and under `--auth` one tenant's burst does not push another tenant's calls back.
"""

from __future__ import annotations

import json
import socket
import threading

import pytest

pytest.importorskip("fastapi", reason="the serve extra is not installed")
import httpx  # noqa: E402

from serve_fakes import start_serve, up, vllm_metrics, wait_until  # noqa: E402,F401  (up: a fixture)

from agentrt.serve.auth import AuthConfig  # noqa: E402

CHAT = {"model": "m", "messages": [{"role": "system", "content": "You plan. " * 30},
                                   {"role": "user", "content": "go"}], "max_tokens": 4}
BUSY = vllm_metrics(running=4, waiting=2, usage=0.9)
IDLE = vllm_metrics(running=0, waiting=0, usage=0.0)
KA, KB = "sk-team-a-0123456789", "sk-team-b-0123456789"


def gated(up, **kw):
    kw.setdefault("gate_poll_s", 0.02)
    return start_serve(up.url, "lru", scheduler="las", **kw)


def posts(up) -> list[dict]:
    return [b for path, b, _ in up.requests if path.endswith("/completions")]


def send_in_thread(url: str, results: list, headers: dict | None = None, body: dict = CHAT) -> threading.Thread:
    def go():
        try:
            results.append(httpx.post(url + "/v1/chat/completions", json=body, headers=headers, timeout=30))
        except httpx.HTTPError as e:
            results.append(e)
    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t


def gate_of(s):
    return s.app.state.bridge.gate


def occupy(s, out: list, **headers) -> threading.Thread:
    """A call the engine is busy with (it answers after 1.5 s): the gate has one in flight, so it
    no longer takes the engine for idle and waits for the scrape."""
    t = send_in_thread(s.url, out, {"X-Fake": "hang", "X-Hang": "1.5", "X-Workflow-Id": "busy", **headers})
    assert wait_until(lambda: len(gate_of(s).inflight) == 1)
    return t


def test_held_calls_go_when_the_scrape_shows_room_and_a_full_gate_answers_429(up):
    up.metrics = BUSY
    s = gated(up, gate_max_held=1)
    try:
        held: list = []
        occupy(s, [])
        t = send_in_thread(s.url, held, {"X-Workflow-Id": "w1"})
        assert wait_until(lambda: len(gate_of(s).held) == 1)
        r = httpx.post(s.url + "/v1/chat/completions", json=CHAT, headers={"X-Workflow-Id": "w2"})
        assert r.status_code == 429 and r.json()["error"]["type"] == "RateLimitError"
        assert 1 <= int(r.headers["retry-after"]) <= 60
        assert wait_until(lambda: len(posts(up)) == 1)         # the busy call, nothing for either
        assert len(gate_of(s).held) == 1
        up.metrics = IDLE
        t.join(10)
        assert held[0].status_code == 200 and len(posts(up)) == 2
        m = httpx.get(s.url + "/metrics").text
        assert 'agentrt_gate_rejected_total{scheduler="las",tenant="default"} 1.0' in m
        assert 'agentrt_gate_releases_total{reason="room",scheduler="las"} 1.0' in m
        assert "agentrt_gate_hold_seconds_count" in m and 'agentrt_gate_held{scheduler="las"} 0.0' in m
    finally:
        s.stop()


def test_a_client_that_disconnects_while_held_is_removed_at_once(up):
    up.metrics = BUSY
    s = gated(up)
    try:
        occupy(s, [])
        body = json.dumps(CHAT).encode()
        sock = socket.create_connection(("127.0.0.1", s.port))
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                     b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        g = gate_of(s)
        assert wait_until(lambda: len(g.held) == 1)
        sock.close()
        assert wait_until(lambda: len(g.held) == 0, 3)
        b = s.app.state.bridge
        assert wait_until(lambda: any(x["status"] == "gone" for x in b.recent), 3)
        assert g.metrics.releases["gone"]._value.get() == 1
        up.metrics = IDLE
        assert httpx.post(s.url + "/v1/chat/completions", json=CHAT).status_code == 200
        assert len(posts(up)) == 2                               # not the one whose client left
    finally:
        s.stop()


def test_under_auth_one_tenants_burst_does_not_push_anothers_calls_back(up, tmp_path):
    p = tmp_path / "keys.json"
    p.write_text(json.dumps({"tenants": {KA: "team-a", KB: "team-b"}}))
    up.metrics = BUSY
    s = gated(up, auth=AuthConfig.load(p))
    try:
        out: list = []
        occupy(s, [], Authorization=f"Bearer {KA}")
        threads = [send_in_thread(s.url, out, {"Authorization": f"Bearer {KA}", "X-Workflow-Id": f"a{i}"})
                   for i in range(5)]
        g = gate_of(s)
        assert wait_until(lambda: len(g.held) == 5)
        threads.append(send_in_thread(s.url, out, {"Authorization": f"Bearer {KB}", "X-Workflow-Id": "b"}))
        assert wait_until(lambda: len(g.held) == 6)
        # room for one call per scrape: the pool is full but for one prompt
        cap = g.capacity_blocks()
        need = next(iter(g.held.values())).info.n_full
        up.metrics = vllm_metrics(running=1, waiting=0, usage=(cap - need) / cap)
        for t in threads:
            t.join(20)
        assert all(r.status_code == 200 for r in out)
        tenants = [b["vllm_xargs"]["agentrt_tenant"] for b in posts(up)][1:]
        assert tenants.index("team-b") <= 1, tenants          # not behind team-a's whole burst
    finally:
        s.stop()

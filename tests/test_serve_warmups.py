"""Warm-ups beside other tenants' traffic (item 10 of issue 42): a long stream that is already
answering never holds another tenant's warm-ups back, a call still waiting for its first byte
does, and one tenant's warm-ups keep the upstream busy at most its `warmup_share` of a minute."""

from __future__ import annotations

import asyncio
import threading

import pytest

pytest.importorskip("fastapi", reason="the serve extra is not installed")
import httpx  # noqa: E402

from serve_fakes import FakeUpstream, start_serve, wait_until  # noqa: E402

from agentrt.serve.act_loop import WarmupShare  # noqa: E402
from agentrt.serve.identity import resolve_identity  # noqa: E402
from agentrt.serve.runtime_bridge import RuntimeBridge  # noqa: E402

USAGE = {"prompt_tokens": 100, "prompt_tokens_details": {"cached_tokens": 0}}


def chat(system: str, user: str) -> dict:
    return {"model": "m", "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}]}


def teach(url: str, tenant: str) -> None:
    """plan then code in two workflows (code's anchor confirmed), then a third waits after plan."""
    for wf, agents in (("w1", "PC"), ("w2", "PC"), ("w3", "P")):
        for a in agents:
            system = ("You plan. " if a == "P" else "You write code. ") * 40
            r = httpx.post(url + "/v1/chat/completions", json=chat(system, wf), timeout=20,
                           headers={"X-Tenant-Id": tenant, "X-Agent-Id": a, "X-Workflow-Id": wf,
                                    "X-Workflow-End": str(wf != "w3" and a == "C").lower()})
            assert r.status_code == 200, r.text


def warmups(u: FakeUpstream) -> list:
    return [b for _, b, _ in u.requests if (b.get("vllm_xargs") or {}).get("agentrt_warmup") == "true"]


def test_another_tenants_long_stream_does_not_block_warmups():
    u = FakeUpstream()
    s = start_serve(u.url, "cachesage", act_interval_s=0.1)
    first_chunk, done = threading.Event(), threading.Event()
    try:
        b = s.app.state.bridge
        teach(s.url, "team-b")

        def stream():                            # team-a: one event, then 6 s of decoding
            with httpx.stream("POST", s.url + "/v1/chat/completions", json={**chat("x", "y"), "stream": True},
                              headers={"X-Tenant-Id": "team-a", "X-Fake": "stream-hang", "X-Hang": "6"},
                              timeout=30) as r:
                for _ in r.iter_bytes():
                    first_chunk.set()
            done.set()
        threading.Thread(target=stream, daemon=True).start()
        assert first_chunk.wait(10)
        b.cache.capacity_tokens = 0              # code's prefix counts as evicted from now on
        b.cache.add_work(10)
        assert wait_until(lambda: warmups(u), 3), "no warm-up while another tenant's stream ran"
        assert not done.is_set() and b.in_flight >= 1
        assert warmups(u)[0]["vllm_xargs"]["agentrt_tenant"] == "team-b"
    finally:
        u.close()                                # ends the hanging stream
        done.wait(10)
        s.stop()


def test_a_call_waiting_for_its_first_byte_holds_warmups_back():
    clock = [0.0]
    b = RuntimeBridge("cachesage", clock=lambda: clock[0])
    sent = []

    async def post(path, body):
        sent.append(body)
        return 200, {"usage": USAGE}

    def call(agent, wf, system, end=False, finish=True):
        body = chat(system, wf)
        ident = resolve_identity({"x-agent-id": agent, "x-workflow-id": wf, "x-workflow-end": str(end).lower()},
                                 body, b.next_call_number())
        c = b.arrive("/v1/chat/completions", body, ident)
        clock[0] += 1.0
        if finish:
            b.finish(c, 200, USAGE)
        return c

    for wf in ("w1", "w2"):
        call("A", wf, "plan " * 60)
        call("B", wf, "code " * 60, end=True)
    b.cache.add_work(10)
    call("A", "w3", "plan " * 60)
    waiting = call("Z", "other", "z " * 60, finish=False)
    assert asyncio.run(b.acts.act_once(post)) == 0 and b.starting == 1
    b.answering(waiting)                          # its answer started: the engine is decoding it
    assert b.starting == 0 and asyncio.run(b.acts.act_once(post)) == 1
    b.finish(waiting, 200, USAGE)
    assert b.in_flight == 0 and b.starting == 0


def test_warmup_share_bounds_one_tenants_warmups():
    share = WarmupShare(0.1, window_s=60.0)
    assert share.allows("a", 0.0)
    share.add("a", 7.0, 0.0)                      # 7 s of the minute's 6 s share
    assert not share.allows("a", 1.0) and share.allows("b", 1.0)
    assert share.allows("a", 60.0)               # decayed: 7 s * e^-1 < 6 s
    with pytest.raises(ValueError, match="warmup_share"):
        WarmupShare(0.0)


def test_a_tenant_over_its_share_gets_no_warmup():
    clock = [0.0]
    b = RuntimeBridge("cachesage", clock=lambda: clock[0], warmup_share=0.01)
    b.acts.share.add("default", 5.0, 0.0)             # 5 s busy with warm-ups: over 1% of a minute
    sent = []

    async def post(path, body):
        sent.append(body)
        return 200, {"usage": USAGE}
    for wf in ("w1", "w2"):
        for agent, end in (("A", False), ("B", True)):
            body = chat(("plan " if agent == "A" else "code ") * 60, wf)
            ident = resolve_identity({"x-agent-id": agent, "x-workflow-id": wf, "x-workflow-end": str(end).lower()},
                                     body, b.next_call_number())
            b.finish(b.arrive("/v1/chat/completions", body, ident), 200, USAGE)
            clock[0] += 1
    b.cache.add_work(10)
    body = chat("plan " * 60, "w3")
    b.finish(b.arrive("/v1/chat/completions", body, resolve_identity({"x-agent-id": "A", "x-workflow-id": "w3"},
                                                                     body, b.next_call_number())), 200, USAGE)
    assert asyncio.run(b.acts.act_once(post)) == 0 and not sent
    assert b'outcome="share"' in b.metrics.exposition()

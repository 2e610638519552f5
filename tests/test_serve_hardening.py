"""`agentrt serve` against clients that leave, lie about sizes, nest deep, invent ids, or are
another tenant: each case found by a review of the server (real sockets, a fake upstream)."""

from __future__ import annotations

import json
import socket
import time

import pytest

pytest.importorskip("fastapi", reason="the serve extra is not installed")
import httpx  # noqa: E402

from serve_fakes import up, start_serve, wait_until  # noqa: E402,F401  (up: a fixture)

from agentrt.serve.auth import AuthConfig  # noqa: E402
from agentrt.serve.identity import resolve_identity  # noqa: E402
from agentrt.serve.metrics import LabelCap  # noqa: E402
from agentrt.serve.runtime_bridge import RuntimeBridge  # noqa: E402
from agentrt.serve.upstream import Response, UpstreamError  # noqa: E402

CHAT = {"model": "m", "messages": [{"role": "system", "content": "You plan. " * 30},
                                   {"role": "user", "content": "go"}]}
KA, KB = "sk-team-a-0123456789", "sk-team-b-0123456789"
USAGE = {"prompt_tokens": 100, "prompt_tokens_details": {"cached_tokens": 0}}


@pytest.fixture
def keys(tmp_path):
    p = tmp_path / "keys.json"
    p.write_text(json.dumps({"tenants": {KA: "team-a", KB: "team-b"}}))
    return AuthConfig.load(p)


def auth(key: str, **headers) -> dict:
    return {"Authorization": f"Bearer {key}", **headers}


def test_a_call_whose_client_left_is_never_sent_again(up):
    s = start_serve(up.url, "lru", read_timeout_s=60)
    try:
        assert httpx.post(s.url + "/v1/chat/completions", json=CHAT).status_code == 200   # pools a connection
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(s.url + "/v1/chat/completions", json=CHAT, timeout=0.5,
                       headers={"X-Fake": "hang", "X-Hang": "3"})
        b = s.app.state.bridge
        # the watcher closed the (reused) connection; the keep-alive retry must not resend it
        assert wait_until(lambda: b.in_flight == 0, 2.5), "the call's slot was held by a resent copy"
        time.sleep(0.3)
        assert len(up.requests) == 2
        assert b.recent[-1]["status"] == "gone"
    finally:
        s.stop()


@pytest.mark.parametrize("field,value", [("max_tokens", -10**18), ("max_tokens", 0),
                                         ("max_completion_tokens", 2**40), ("max_tokens", 1.5),
                                         ("max_tokens", True), ("max_completion_tokens", "8")])
def test_output_limits_vllm_refuses_buy_no_precedence(up, keys, field, value):
    """vLLM judges these (its error comes back unchanged); `fair` charges them as unknown."""
    s = start_serve(up.url, "lru", scheduler="fair", auth=keys)
    try:
        u = s.url + "/v1/chat/completions"
        httpx.post(u, json=CHAT, headers=auth(KB, **{"X-Workflow-Id": "b"}))
        httpx.post(u, json={**CHAT, field: value}, headers=auth(KA, **{"X-Workflow-Id": "a"}))
        assert up.requests[-1][1][field] == value                   # forwarded as sent
        httpx.post(u, json=CHAT, headers=auth(KA, **{"X-Workflow-Id": "a"}))
        pri = [r["priority"] for r in s.app.state.bridge.recent]
        assert all(0 <= p < 2**20 for p in pri), pri
    finally:
        s.stop()


def test_a_tenant_cannot_buy_precedence_with_its_expected_output(up, keys):
    """Under `fair`, each call is charged its prompt and max_tokens at arrival; the largest
    max_tokens taken as an estimate only pushes the caller's own clock back."""
    s = start_serve(up.url, "lru", scheduler="fair", auth=keys)
    try:
        u = s.url + "/v1/chat/completions"
        for _ in range(2):
            httpx.post(u, json=CHAT, headers=auth(KB, **{"X-Workflow-Id": "b"}))
        httpx.post(u, json={**CHAT, "max_tokens": 2**24}, headers=auth(KA, **{"X-Workflow-Id": "a"}))
        httpx.post(u, json=CHAT, headers=auth(KA, **{"X-Workflow-Id": "a"}))
        httpx.post(u, json=CHAT, headers=auth(KB, **{"X-Workflow-Id": "b"}))
        pri = [(r["tenant"], r["priority"]) for r in s.app.state.bridge.recent]
        assert all(p >= 0 for _, p in pri)
        claim, after = pri[2][1], pri[3][1]
        assert pri[2][0] == pri[3][0] == "team-a" and after - claim >= 2**24   # A paid for it
    finally:
        s.stop()


@pytest.mark.parametrize("depth", [255, 300, 1000])
def test_nesting_the_server_cannot_forward_is_a_400_and_counts_nothing(up, depth):
    s = start_serve(up.url, "lru")
    try:
        for body in ('{"model":"m","messages":[{"role":"user","content":"x"}],"extra":'
                     + "[" * depth + "]" * depth + "}",
                     '{"model":"m","messages":[{"role":"user","content":'
                     + "[" * (depth - 3) + "]" * (depth - 3) + "}]}"):
            r = httpx.post(s.url + "/v1/chat/completions", content=body.encode(),
                           headers={"content-type": "application/json", "X-Workflow-End": "true"})
            assert r.status_code == 400 and r.json()["error"]["param"] == "body", r.text
        b = s.app.state.bridge
        assert not up.requests and b.in_flight == 0 and not b.runtime.workflows
        assert b.metrics.totals()["prompt_tokens"] == 0
        # 254 levels still pass: what orjson can write back
        ok = '{"model":"m","messages":[{"role":"user","content":"x"}],"extra":' + "[" * 253 + "]" * 253 + "}"
        r = httpx.post(s.url + "/v1/chat/completions", content=ok.encode(),
                       headers={"content-type": "application/json"})
        assert r.status_code == 200 and len(up.requests) == 1
    finally:
        s.stop()


def test_a_workflow_key_over_the_connectors_limit_is_refused_naming_its_source(up, keys):
    s = start_serve(up.url, "lru", auth=keys)
    try:
        r = httpx.post(s.url + "/v1/chat/completions", json=CHAT, headers=auth(KA, **{"X-Workflow-Id": "w" * 512}))
        assert r.status_code == 400 and r.json()["error"]["param"] == "x-workflow-id"
        r = httpx.post(s.url + "/v1/chat/completions", json={**CHAT, "session_id": "s" * 510}, headers=auth(KA))
        assert r.status_code == 400 and r.json()["error"]["param"] == "session_id"
        r = httpx.post(s.url + "/v1/chat/completions", json=CHAT, headers=auth(KA, **{"X-Workflow-Id": "w" * 500}))
        assert r.status_code == 200
        assert len(up.requests[-1][1]["vllm_xargs"]["agentrt_workflow"]) <= 512
    finally:
        s.stop()


def test_tenants_are_not_told_the_upstreams_address(keys):
    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        port = so.getsockname()[1]                      # nothing listens there
    for cfg, leaks in ((dict(auth=keys), False), ({}, True)):
        s = start_serve(f"http://127.0.0.1:{port}", "lru", connect_timeout_s=1, **cfg)
        try:
            for path, method in (("/v1/chat/completions", "post"), ("/v1/models", "get")):
                kw = {"json": CHAT} if method == "post" else {}
                r = getattr(httpx, method)(s.url + path, headers=auth(KA), **kw)
                msg = r.json()["error"]["message"]
                assert r.status_code == 502 and "unreachable" in msg
                assert (str(port) in msg) is leaks and ("127.0.0.1" in msg) is leaks, msg
        finally:
            s.stop()


def test_a_bad_content_length_from_the_upstream_is_an_upstream_error():
    for bad in (b"abc", b"-5"):
        with pytest.raises(UpstreamError, match="content-length"):
            Response(None, None, 200, [(b"content-length", bad)])


def call(b: RuntimeBridge, tenant: str, agent: str, workflow: str, system: str, user: str = "go"):
    body = {"model": "m", "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}]}
    ident = resolve_identity({"x-agent-id": agent, "x-workflow-id": workflow}, body, b.next_call_number(), tenant)
    c = b.arrive("/v1/chat/completions", body, ident)
    b.finish(c, 200, USAGE)
    return c


def test_one_tenant_inventing_agents_and_prompts_keeps_another_tenants_state():
    b = RuntimeBridge("cachesage", kv_capacity_tokens=10**9)
    c = call(b, "team-b", "planner", "b1", "You are B's planner. " * 40)
    before = b.cache.gpu_prefix("team-b", c.blocks.hash_ids)
    assert before > 0
    for i in range(4200):                       # past every table's cap: profiles, templates
        call(b, "team-a", f"x{i}", f"a{i % 50}", "A " * 10)
    call(b, "team-a", "big", "abig", "A", user="y" * (256 * 70_000))   # past the cache estimate's
    assert b.runtime.profile("team-b", "planner") is not None
    assert ("team-b", "planner") in b.templates
    assert b.cache.gpu_prefix("team-b", c.blocks.hash_ids) == before
    assert len(b.runtime.agents) <= b.runtime.max_agents and b.runtime.profiles_dropped > 0
    assert b.metrics.agent_label("b-new", "team-b") == "b-new"       # A named at most a quarter
    assert b.metrics.agent_label("x-late", "team-a") == "other"


def test_workflows_the_runtime_ends_by_itself_leave_the_scheduler_too():
    for sched in ("las", "fair", "agent"):
        b = RuntimeBridge("lru", scheduler=sched)
        b.runtime.max_workflows_per_tenant = 100
        for i in range(1000):
            call(b, "team-a", "solo", f"w{i}", "S")
        s = b.scheduler.sched
        held = len(s.service.work) if hasattr(s, "service") else sum(len(v) for v in s.live.values())
        assert len(b.runtime.workflows) == 100 and held <= 100, (sched, held)


def test_one_workflow_naming_an_agent_per_call_stays_bounded():
    b = RuntimeBridge("lru")
    b.runtime.max_threads_per_workflow = 64
    for i in range(500):
        call(b, "team-a", f"agent-{i}", "w", "S")
    wf = b.runtime.workflows[("team-a", "team-a/w")]
    assert len(wf.threads) == 65 and "~other" in wf.threads           # 64 named, the rest shared
    assert wf.calls == 500 and b.runtime.overflow_calls == 436
    assert b.runtime.stats()["overflow_calls"] == 436


def test_label_cap_per_key():
    alone = LabelCap(8, 2)
    assert [alone(f"a{i}", "A") for i in range(9)] == [f"a{i}" for i in range(8)] + ["other"]
    cap = LabelCap(8, 2)
    assert [cap(f"a{i}", "A") for i in range(3)] == ["a0", "a1", "a2"]  # one tenant: no share yet
    # B's "a0" is B's own series (a tenant never reads another's), so it counts for B
    assert cap("a0", "B") == "a0"
    assert [cap(f"b{i}", "B") for i in range(2)] == ["b0", "other"]
    assert cap("a3", "A") == "other"                                     # two tenants: shares hold
    assert cap("a1", "A") == "a1" and cap("b0", "B") == "b0"             # held pairs stay theirs
    assert LabelCap(2)("x") == "x"                                       # no per-key limit
    # the keys file names several tenants: the share holds from the first call on, so the
    # tenant that calls first cannot take every label
    known = LabelCap(8, 2, shared=True)
    assert [known(f"a{i}", "A") for i in range(3)] == ["a0", "a1", "other"]
    assert known("b0", "B") == "b0"


def test_per_agent_series_are_per_tenant():
    """Two tenants' agents of the same name are two series: one tenant's calls never move the
    other's hit rate (found by a review: one shared `planner` series, rewritten by B's call)."""
    b = RuntimeBridge("lru", known_tenants=2)
    usage = {"prompt_tokens": 1000, "prompt_tokens_details": {"cached_tokens": 900}}
    b.metrics.call("planner", "/v1/chat/completions", 200, 0.1, usage, tenant="team-a")
    b.metrics.call("planner", "/v1/chat/completions", 200, 0.1,
                   {"prompt_tokens": 1000, "prompt_tokens_details": {"cached_tokens": 0}}, tenant="team-b")
    text = b.metrics.exposition().decode()
    assert 'agentrt_agent_hit_rate{agent="planner",policy="lru",tenant="team-a"} 0.9' in text
    assert 'agentrt_agent_hit_rate{agent="planner",policy="lru",tenant="team-b"} 0.0' in text
    assert 'agentrt_prompt_tokens_total{agent="planner",policy="lru",tenant="team-a"} 1000.0' in text


def test_pbkv_ta_agent_tables_stay_bounded_when_a_client_invents_agents(monkeypatch):
    import agentrt.policies.pbkv.anchors as an
    import agentrt.policies.pbkv.time_aware as pt
    import agentrt.policies.pbkv.timing as tm
    monkeypatch.setattr(pt, "MAX_AGENT_KEYS", 50)
    monkeypatch.setattr(tm, "MAX_AGENT_KEYS", 50)
    monkeypatch.setattr(an, "MAX_AGENT_KEYS", 50)
    b = RuntimeBridge("pbkv-ta")
    for i in range(400):                        # two workflows per agent: anchors get confirmed
        for w in ("a", "b"):
            call(b, "team-a", f"x{i}", f"{w}{i}", f"agent {i} " * 60)
            call(b, "team-a", f"x{i}", f"{w}{i}", f"agent {i} " * 60, user="again")
    p = b.runtime.policy
    assert len(p.anchors.starts) <= 50 and len(p.anchors.of) == 50 and len(p._tail) <= 50   # the cap was reached
    assert all(len(t) <= 50 for t in (p.times.svc, p.times.gap, p.times.tool_log, p.times.err_log))
    held = {a for table in p.anchors.table.values() for agents in table.values() for a in agents}
    assert held <= {agent for _, agent in p.anchors.of}             # dropped agents left the table

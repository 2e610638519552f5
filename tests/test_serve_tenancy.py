"""`agentrt serve` tenancy against a real local HTTP upstream: per-tenant `cache_salt` (HMAC, never
the tenant's name), tenant-scoped workflows (no cross-tenant effects), API keys -> tenants, admin
routes, and fields clients may not set. The real-vLLM check of `cache_salt` is at the end.
"""

from __future__ import annotations

import asyncio
import json

import pytest

pytest.importorskip("fastapi", reason="the serve extra is not installed")
import httpx  # noqa: E402

from agentrt.serve.auth import AuthConfig, AuthError, Salts, tenant_scoped  # noqa: E402
from serve_fakes import up, FakeUpstream, start_serve  # noqa: E402
from vllm_support import requires_vllm  # noqa: E402

KEY_A, KEY_B, ADMIN = "sk-team-a-0123456789", "sk-team-b-0123456789", "sk-admin-0123456789ab"
SECRET = b"test-secret-0123456789abcdef"


def chat(user: str = "go", system: str = "You are the planner. " * 20, **kw) -> dict:
    return {"model": "m", "messages": [{"role": "system", "content": system},
                                       {"role": "user", "content": user}], **kw}


def auth_file(tmp_path, suffix: str = ".json"):
    p = tmp_path / f"keys{suffix}"
    if suffix == ".toml":
        p.write_text(f'admin_keys = ["{ADMIN}"]\n[tenants]\n"{KEY_A}" = "team-a"\n"{KEY_B}" = "team-b"\n')
    else:
        p.write_text(json.dumps({"tenants": {KEY_A: "team-a", KEY_B: "team-b"}, "admin_keys": [ADMIN]}))
    return p


@pytest.fixture
def secured(up, tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTRT_CACHE_SALT_SECRET", SECRET.decode())
    srv = start_serve(up.url, "cachesage", auth=AuthConfig.load(auth_file(tmp_path)),
                      upstream_api_key="server-upstream-key")
    yield srv
    srv.stop()


def bearer(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


# ------------------------------------------------------------------ salts and keys
def test_salt_is_a_keyed_hmac_never_the_tenant_name():
    s = Salts(SECRET)
    a, b = s("team-a"), s("team-b")
    assert a != b and len(a) == 64 and "team" not in a and a == s("team-a")
    assert Salts(b"another-secret-0123456789")("team-a") != a
    assert Salts().generated and Salts()("team-a") != Salts()("team-a")     # generated per start


def test_auth_file_json_and_toml(tmp_path):
    for suffix in (".json", ".toml"):
        cfg = AuthConfig.load(auth_file(tmp_path, suffix))
        assert cfg.principal(f"Bearer {KEY_A}".encode()).tenant == "team-a"
        assert cfg.principal(f"Bearer {ADMIN}".encode()).admin
        assert cfg.principal(b"Bearer sk-unknown-000000000000") is None and cfg.principal(None) is None
    bad = tmp_path / "bad.json"
    for text in ('{"tenants": {"short": "a"}}', '{"tenants": {"sk-0123456789abcdef": "a/b"}}', "[", "{}"):
        bad.write_text(text)
        with pytest.raises(AuthError):
            AuthConfig.load(bad)


def test_scoped_workflow_keys_are_unique_per_tenant():
    keys = {tenant_scoped(t, w) for t, w in [("default", "run-42"), ("team-a", "run-42"),
                                             ("default", "team-a/run-42"), ("team-b", "run-42")]}
    assert len(keys) == 4 and tenant_scoped("default", "run-42") == "run-42"


# ------------------------------------------------------------------ isolation through the server
def test_each_tenant_gets_its_own_salt_and_the_header_cannot_change_it(secured, up):
    same = chat()
    for key in (KEY_A, KEY_B, KEY_A):
        r = httpx.post(secured.url + "/v1/chat/completions", json=same,
                       headers={**bearer(key), "X-Tenant-Id": "team-a"})
        assert r.status_code == 200, r.text
    salts = [b["cache_salt"] for _, b, _ in up.requests]
    s = Salts(SECRET)
    assert salts == [s("team-a"), s("team-b"), s("team-a")]          # B's X-Tenant-Id is ignored
    assert [b["vllm_xargs"]["agentrt_tenant"] for _, b, _ in up.requests] == ["team-a", "team-b", "team-a"]
    for _, _, h in up.requests:                  # the client's key never reaches the upstream
        assert h["authorization"] == "Bearer server-upstream-key" and "x-tenant-id" not in h


def test_no_cross_tenant_workflow_effects(secured, up):
    h_a = {**bearer(KEY_A), "X-Workflow-Id": "run-42", "X-Agent-Id": "planner"}
    h_b = {**bearer(KEY_B), "X-Workflow-Id": "run-42", "X-Agent-Id": "planner", "X-Workflow-End": "true"}
    assert httpx.post(secured.url + "/v1/chat/completions", json=chat(), headers=h_a).status_code == 200
    assert httpx.post(secured.url + "/v1/chat/completions", json=chat(), headers=h_b).status_code == 200
    wfs = secured.app.state.bridge.runtime.workflows
    assert ("team-a", "team-a/run-42") in wfs and ("team-b", "team-b/run-42") not in wfs   # B ended its own
    sent = [b for _, b, _ in up.requests]
    assert [b["vllm_xargs"]["agentrt_workflow"] for b in sent] == ["team-a/run-42", "team-b/run-42"]
    assert [b["session_id"] for b in sent] == ["team-a/run-42", "team-b/run-42"]
    assert sent[1]["vllm_xargs"]["agentrt_call"] == 0                  # B's call count is its own
    # B cannot end A's workflow through the route either: a tenant key ends its own workflows only
    r = httpx.post(secured.url + "/agentrt/workflows/run-42/end?tenant=team-a", headers=bearer(KEY_B))
    assert r.status_code == 200 and r.json()["tenant"] == "team-b" and ("team-a", "team-a/run-42") in wfs
    r = httpx.post(secured.url + "/agentrt/workflows/run-42/end?tenant=team-a", headers=bearer(ADMIN))
    assert r.status_code == 200 and ("team-a", "team-a/run-42") not in wfs


def test_keys_and_admin_routes(secured, up):
    url = secured.url
    assert httpx.post(url + "/v1/chat/completions", json=chat()).status_code == 401
    r = httpx.post(url + "/v1/chat/completions", json=chat(), headers=bearer("sk-nobody-0123456789"))
    assert r.status_code == 401 and r.json()["error"]["type"] == "AuthenticationError"
    assert httpx.post(url + "/v1/chat/completions", json=chat(), headers=bearer(ADMIN)).status_code == 403
    for path in ("/agentrt/state", "/metrics"):
        assert httpx.get(url + path).status_code == 401
        assert httpx.get(url + path, headers=bearer(KEY_A)).status_code == 403
        assert httpx.get(url + path, headers=bearer(ADMIN)).status_code == 200
    assert httpx.post(url + "/agentrt/workflows/x/end").status_code == 401
    assert httpx.get(url + "/v1/models").status_code == 401
    assert "upstream" not in httpx.get(url + "/health").json()
    assert not up.requests                       # nothing unauthenticated went upstream


def test_clients_cannot_set_server_fields(secured, up):
    h = bearer(KEY_A)
    for extra, param in [({"cache_salt": "x"}, "cache_salt"),
                         ({"vllm_xargs": {"agentrt_warmup": "true"}}, "vllm_xargs.agentrt_warmup"),
                         ({"vllm_xargs": {"agentrt_tenant": "team-b"}}, "vllm_xargs.agentrt_tenant"),
                         ({"kv_transfer_params": {"do_remote_prefill": True}}, "kv_transfer_params")]:
        r = httpx.post(secured.url + "/v1/chat/completions", json=chat(**extra), headers=h)
        assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
    r = httpx.post(secured.url + "/v1/chat/completions", json=chat(priority=-100, session_id="theirs"),
                   headers={**h, "X-Vllm-Priority": "-100"})
    assert r.status_code == 200
    (_, body, hdrs), = up.requests
    assert "priority" not in body and "x-vllm-priority" not in hdrs
    assert body["session_id"] == "team-a/theirs"
    assert secured.app.state.bridge.in_flight == 0


def test_without_auth_named_tenants_are_salted_and_scoped(up):
    srv = start_serve(up.url, "lru")
    try:
        for tenant in (None, "team-a", "team-b"):
            h = {"X-Workflow-Id": "run-1"} | ({"X-Tenant-Id": tenant} if tenant else {})
            assert httpx.post(srv.url + "/v1/chat/completions", json=chat(), headers=h).status_code == 200
        sent = [b for _, b, _ in up.requests]
        assert "cache_salt" not in sent[0]        # the default tenant shares the engine's plain cache
        assert sent[1]["cache_salt"] != sent[2]["cache_salt"]
        assert [b["vllm_xargs"]["agentrt_workflow"] for b in sent] == ["run-1", "team-a/run-1", "team-b/run-1"]
        r = httpx.post(srv.url + "/v1/chat/completions", json=chat(), headers={"X-Tenant-Id": "a b/c"})
        assert r.status_code == 400 and r.json()["error"]["param"] == "x-tenant-id"
    finally:
        srv.stop()


def test_warmups_carry_their_tenants_salt():
    from agentrt.serve.identity import resolve_identity
    from agentrt.serve.runtime_bridge import RuntimeBridge
    clock = [0.0]
    bridge = RuntimeBridge("cachesage", {}, clock=lambda: clock[0])
    bridge.salts = Salts(SECRET)
    sent = []

    async def post(path, body):
        sent.append(body)
        return 200, {"usage": {"prompt_tokens": 50, "prompt_tokens_details": {"cached_tokens": 0}}}

    def call(agent, wf, system, end=False):
        body = chat(f"{wf} {agent}", system)
        ident = resolve_identity({"x-agent-id": agent, "x-workflow-id": wf,
                                  "x-workflow-end": str(end).lower()}, body, 0, tenant="team-a")
        c = bridge.arrive("/v1/chat/completions", body, ident)
        clock[0] += 1.0
        bridge.finish(c, 200, {"prompt_tokens": 100, "prompt_tokens_details": {"cached_tokens": 0}})
    for wf in ("w1", "w2"):
        call("A", wf, "planner")
        call("B", wf, "coder " * 60, end=True)
    bridge.cache.add_work(10)
    call("A", "w3", "planner")
    assert asyncio.run(bridge.acts.act_once(post)) == 1
    assert sent[0]["cache_salt"] == Salts(SECRET)("team-a")
    assert sent[0]["vllm_xargs"]["agentrt_workflow"] == "team-a/warmup:B"


def test_serve_command_refuses_insecure_setups(tmp_path):
    from typer.testing import CliRunner

    from agentrt.cli import app
    r = CliRunner().invoke(app, ["serve", "--upstream", "http://127.0.0.1:1", "--host", "0.0.0.0"])
    assert r.exit_code != 0 and "--auth" in str(r.exception)
    r = CliRunner().invoke(app, ["serve", "--upstream", "http://127.0.0.1:1", "--upstream-api-key", "k"])
    assert r.exit_code != 0 and "--auth" in str(r.exception)
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    r = CliRunner().invoke(app, ["serve", "--upstream", "http://127.0.0.1:1", "--auth", str(bad)])
    assert r.exit_code != 0 and "no keys" in str(r.exception)
    out = CliRunner().invoke(app, ["serve", "--help"]).output
    for opt in ("--auth", "--cache-salt-secret-file", "--read-timeout", "--connect-timeout"):
        assert opt in out


# ------------------------------------------------------------------ real vLLM: cache_salt separates
@pytest.mark.slow
@requires_vllm
def test_cache_salt_separates_two_tenants_prefix_cache_on_vllm(vllm_servers, tmp_path, monkeypatch):
    from test_serve import MODEL, shared_upstream, words
    upstream = shared_upstream(vllm_servers)
    monkeypatch.setenv("AGENTRT_CACHE_SALT_SECRET", SECRET.decode())
    srv = start_serve(upstream.base_url, "lru", auth=AuthConfig.load(auth_file(tmp_path)))
    try:
        system = words(f"salt-{tmp_path.name}", 150)

        def cached(key: str) -> int:
            r = httpx.post(srv.url + "/v1/chat/completions", headers=bearer(key), timeout=60,
                           json={"model": MODEL, "max_tokens": 1, "temperature": 0,
                                 "messages": [{"role": "system", "content": system},
                                              {"role": "user", "content": "hi"}]})
            assert r.status_code == 200, r.text
            return r.json()["usage"]["prompt_tokens_details"]["cached_tokens"]
        a1, a2 = cached(KEY_A), cached(KEY_A)
        b1, b2 = cached(KEY_B), cached(KEY_B)
        assert a1 == 0 and a2 > 0        # A's second call hits A's cached prefix
        assert b1 == 0, "tenant B hit tenant A's cached prefix"
        assert b2 > 0
    finally:
        srv.stop()

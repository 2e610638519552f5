"""Identity from every convention, through `agentrt serve` with the stock OpenAI client: vLLM's
`session_id` (body, `X-Session-ID`, `vllm_xargs`), Dynamo's `nvext.agent_context` and
`X-Dynamo-Session-ID`, Claude Code's and llm-d's session headers, agentrt's own; the same
workflow in the server's runtime and in what the engine's connector reads; precedence, session
ends, hostile values, tenants; and the standard kv_hints a client or the server sends.
Against serve's fake upstream (serve_fakes.py): no engine.
"""

from __future__ import annotations

import copy
import json
import time
from types import SimpleNamespace

import pytest

pytest.importorskip("fastapi", reason="the serve extra is not installed")
openai = pytest.importorskip("openai", reason="the openai client is not installed")

from agentrt.serve.auth import AuthConfig  # noqa: E402
from agentrt.wire.identity import request_identity  # noqa: E402
from serve_fakes import FakeUpstream, start_serve, up  # noqa: E402,F401

MSGS = [{"role": "system", "content": "You are the coder. " * 20}, {"role": "user", "content": "go"}]
KEY_A, KEY_B = "sk-team-a-0123456789", "sk-team-b-0123456789"
TOOL_ANSWER = {"id": "t", "object": "chat.completion", "choices": [
    {"index": 0, "message": {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "run", "arguments": "{}"}}]},
     "finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}}
TOOLS = [{"type": "function", "function": {"name": "run", "parameters": {"type": "object", "properties": {}}}}]

# (convention, extra headers, extra body): each names the workflow "run-17"
CONVENTIONS = [
    ("agentrt header", {"X-Workflow-Id": "run-17"}, {}),
    ("agentrt metadata", {}, {"metadata": {"workflow_id": "run-17"}}),
    ("vllm body", {}, {"session_id": "run-17"}),
    ("vllm header", {"X-Session-ID": "run-17"}, {}),
    ("vllm xargs", {}, {"vllm_xargs": {"session_id": "run-17"}}),
    ("dynamo nvext", {}, {"nvext": {"agent_context": {"session_type_id": "coding", "session_id": "run-17",
                                                      "trajectory_id": "run-17:coder"}}}),
    ("dynamo header", {"X-Dynamo-Session-ID": "run-17"}, {}),
    ("claude code", {"x-claude-code-session-id": "run-17"}, {}),
    ("llm-d affinity", {"x-session-affinity": "run-17"}, {}),
    ("llm-d session-id", {"session-id": "run-17"}, {}),
]


@pytest.fixture
def served(up):
    srv = start_serve(up.url, "pbkv-ta")
    yield srv
    srv.stop()


def client(srv, key: str = "x"):
    return openai.OpenAI(base_url=srv.url + "/v1", api_key=key, max_retries=0)


def call(cl, headers=None, body=None, **kw):
    return cl.chat.completions.create(model="m", messages=MSGS, extra_headers=headers or {},
                                      extra_body=body or {}, **kw)


def engine_view(body: dict):
    """What the agentrt connector reads from one forwarded request (identity, hints)."""
    req = SimpleNamespace(request_id="r", session_id=body.get("session_id"), kv_hints=None,
                          kv_transfer_params=copy.deepcopy(body.get("kv_transfer_params")),
                          sampling_params=SimpleNamespace(extra_args=body.get("vllm_xargs")))
    return request_identity(req)


def wf(srv, tenant: str, key: str):
    return srv.app.state.bridge.runtime.workflows.get((tenant, key))


def test_every_convention_is_one_workflow_in_serve_and_the_connector(served, up):
    cl = client(served)
    for name, headers, body in CONVENTIONS:
        call(cl, headers, body)
    w = wf(served, "default", "run-17")
    assert w is not None and w.calls == len(CONVENTIONS) and len(served.app.state.bridge.runtime.workflows) == 1
    for i, ((name, _, _), (_, body, hdrs)) in enumerate(zip(CONVENTIONS, up.requests)):
        ident, hints = engine_view(body)
        assert (ident.workflow, ident.source, ident.call) == ("run-17", "kv_hints", i), name
        assert body["session_id"] == "run-17" and body["vllm_xargs"]["agentrt_workflow"] == "run-17", name
        assert not {"x-session-id", "x-dynamo-session-id", "x-claude-code-session-id",
                    "x-session-affinity", "session-id"} & set(hdrs), name      # never forwarded
    # the thread of a Dynamo trajectory and of a Claude Code subagent reach the connector
    _, body, _ = up.requests[5]
    assert engine_view(body)[0].thread == "run-17:coder"
    call(cl, {"x-claude-code-session-id": "run-17", "x-claude-code-agent-id": "sub-1"})
    assert engine_view(up.requests[-1][1])[0].thread == "sub-1"
    sources = [r["workflow_source"] for r in list(served.app.state.bridge.recent)[:len(CONVENTIONS)]]
    assert sources == ["header", "metadata", "session_id", "session_id", "session_id", "dynamo", "dynamo",
                       "claude_code", "llm-d", "llm-d"]


def test_precedence_follows_the_documented_order(served, up):
    cl = client(served)
    everything = {"X-Workflow-Id": "agentrt", "X-Session-ID": "vllm", "X-Dynamo-Session-ID": "dyn",
                  "x-claude-code-session-id": "claude", "x-session-affinity": "llmd"}
    call(cl, everything, {"nvext": {"agent_context": {"session_id": "dyn-body"}}})
    del everything["X-Workflow-Id"]
    call(cl, everything, {"nvext": {"agent_context": {"session_id": "dyn-body"}}})
    del everything["X-Session-ID"]
    call(cl, everything, {"nvext": {"agent_context": {"session_id": "dyn-body"}}})
    call(cl, everything)
    del everything["X-Dynamo-Session-ID"]
    call(cl, everything)
    del everything["x-claude-code-session-id"]
    call(cl, everything)
    assert [b["session_id"] for _, b, _ in up.requests] == ["agentrt", "vllm", "dyn-body", "dyn", "claude", "llmd"]
    # a value further down is never read, so it cannot fail the call
    call(cl, {"X-Session-ID": "ok", "x-session-affinity": "x" * 5000})
    assert up.requests[-1][1]["session_id"] == "ok"


def test_a_session_close_ends_the_workflow_only_for_a_root(served, up):
    cl = client(served)
    root = {"session_id": "s1", "trajectory_id": "s1:planner"}
    call(cl, body={"nvext": {"agent_context": root}})
    child = {"session_id": "s1", "trajectory_id": "s1:coder", "parent_trajectory_id": "s1:planner",
             "trajectory_final": True}
    call(cl, body={"nvext": {"agent_context": child}})
    assert wf(served, "default", "s1") is not None                      # a subagent's end is not the run's
    call(cl, body={"nvext": {"agent_context": dict(root, trajectory_final=True)}})
    assert wf(served, "default", "s1") is None
    assert engine_view(up.requests[-1][1])[0].end and not engine_view(up.requests[-2][1])[0].end
    # Dynamo's header close, with and without a parent
    call(cl, {"X-Dynamo-Session-ID": "s2"})
    call(cl, {"X-Dynamo-Session-ID": "s2", "X-Dynamo-Parent-Session-ID": "p", "X-Dynamo-Session-Final": "true"})
    assert wf(served, "default", "s2") is not None
    call(cl, {"X-Dynamo-Session-ID": "s2", "X-Dynamo-Session-Final": "true"})
    assert wf(served, "default", "s2") is None
    # newer agent contexts close with session_final; agentrt's own ids end with X-Workflow-End only
    call(cl, body={"nvext": {"agent_context": {"session_id": "s3"}}})
    call(cl, body={"nvext": {"agent_context": {"session_id": "s3", "session_final": "true"}}})
    assert wf(served, "default", "s3") is None
    call(cl, {"X-Workflow-Id": "s4", "X-Dynamo-Session-Final": "true"})
    assert wf(served, "default", "s4") is not None


@pytest.mark.parametrize("headers,body,param", [
    ({"X-Dynamo-Session-ID": "x" * 600}, {}, "x-dynamo-session-id"),
    ({"x-claude-code-session-id": "a\tb"}, {}, "x-claude-code-session-id"),
    ({"x-session-affinity": "a" * 513}, {}, "x-session-affinity"),
    ({}, {"nvext": "dynamo"}, "nvext"),
    ({}, {"nvext": {"agent_context": ["s"]}}, "nvext.agent_context"),
    ({}, {"nvext": {"agent_context": {"session_id": 17}}}, "nvext.agent_context.session_id"),
    ({}, {"nvext": {"agent_context": {"session_id": "s", "trajectory_id": "t" * 513}}}, "nvext.agent_context.trajectory_id"),
    ({}, {"nvext": {"agent_context": {"session_id": "s", "trajectory_final": "maybe"}}}, "nvext.agent_context.trajectory_final"),
    ({"X-Dynamo-Session-ID": "s", "X-Dynamo-Session-Final": "2"}, {}, "x-dynamo-session-final"),
])
def test_hostile_values_are_400s_naming_the_field(served, up, headers, body, param):
    with pytest.raises(openai.BadRequestError) as e:
        call(client(served), headers, body)
    assert e.value.body["param"] == param and not up.requests
    assert served.app.state.bridge.in_flight == 0


def test_a_repeated_convention_header_is_refused(served, up):
    import httpx
    for name in ("X-Dynamo-Session-ID", "x-claude-code-session-id", "session-id"):
        r = httpx.post(served.url + "/v1/chat/completions", json={"model": "m", "messages": MSGS},
                       headers=[(name, "a"), (name, "b")])
        assert r.status_code == 400 and r.json()["error"]["param"] == name.lower()
    assert not up.requests


def test_no_convention_lets_a_tenant_touch_anothers_workflow(up, tmp_path):
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({"tenants": {KEY_A: "team-a", KEY_B: "team-b"}}))
    srv = start_serve(up.url, "pbkv-ta", auth=AuthConfig.load(keys))
    try:
        call(client(srv, KEY_A), {"X-Dynamo-Session-ID": "run-42"})
        mine = wf(srv, "team-a", "team-a/run-42")
        assert mine is not None and mine.calls == 1
        b = client(srv, KEY_B)
        for target in ("run-42", "team-a/run-42"):
            for _, headers, body in CONVENTIONS:
                headers = {k: target for k in headers}
                body = json.loads(json.dumps(body).replace("run-17", target))
                call(b, {**headers, "X-Tenant-Id": "team-a", "X-Dynamo-Session-Final": "true"}, body)
            call(b, {"X-Tenant-Id": "team-a"}, {"nvext": {"agent_context": {"session_id": target,
                                                                            "trajectory_final": True}}})
        assert wf(srv, "team-a", "team-a/run-42") is mine and mine.calls == 1 and not mine.ended
        for _, body, _ in up.requests[1:]:
            ident, _ = engine_view(body)
            assert ident.tenant == "team-b" and ident.workflow.startswith("team-b/"), ident
            assert body["session_id"].startswith("team-b/")
    finally:
        srv.stop()


# ------------------------------------------------------------------ standard kv_hints through serve
def retain_env(*directives, scope=None, version="1.0"):
    return {"protocol_version": "0.1", "message_id": "m-1", "actions": [
        {"action_id": "keep", "action_type": "kv.retain", "action_version": version,
         "payload": {"scope": scope, "directives": list(directives)}}]}


def test_a_clients_kv_retain_reaches_the_connector_under_its_tenant(up, tmp_path):
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({"tenants": {KEY_A: "team-a"}}))
    srv = start_serve(up.url, "lru", auth=AuthConfig.load(keys))
    try:
        cl = client(srv, KEY_A)
        claim = {"action_id": "p", "action_type": "vllm.set_priority", "action_version": "1.0",
                 "payload": {"target": "request_cached", "location": "local_g1", "claim_id": "c",
                             "revision": 1, "value": 5, "ttl_seconds": 30}}
        env = retain_env({"start": 0, "end": 512, "priority": 90, "duration": 60})
        env["actions"].append(claim)
        call(cl, {"X-Workflow-Id": "w"}, {"kv_hints": env})
        (_, body, _), = up.requests
        assert "kv_hints" not in body
        ident, hints = engine_view(body)
        assert (ident.tenant, ident.workflow) == ("team-a", "team-a/w")
        assert hints.retain.spans[0].priority == 90 and hints.claims[0].claim_id == "c" and not hints.refused
        for bad, why in [(retain_env({"priority": 101}), "priority"),
                         (retain_env({"priority": 5, "pin": True}), "unknown directive keys"),
                         (retain_env({"start": 0, "end": 8, "priority": 1}, {"start": 8, "priority": 9}), "increase"),
                         (retain_env({"priority": 5}, version="2.0"), "action_version"),
                         ({"actions": [{"action_type": "agentrt.identity", "action_version": "1.0",
                                        "payload": {"workflow_id": "x", "tenant": "team-b"}}]}, "only kv.retain"),
                         ({"actions": [dict(claim, payload=dict(claim["payload"], ttl_seconds=None))]}, "ttl_seconds")]:
            with pytest.raises(openai.BadRequestError) as e:
                call(cl, {}, {"kv_hints": bad})
            assert e.value.body["param"] == "kv_hints" and why in e.value.body["message"], e.value.body
        assert len(up.requests) == 1
    finally:
        srv.stop()


def test_serve_retains_the_context_of_calls_that_may_end_in_a_tool_call(up):
    up.answers["tool"] = (json.dumps(TOOL_ANSWER).encode(), b"")
    srv = start_serve(up.url, "pbkv-ta", retain_tool_calls=True)
    try:
        cl = client(srv)
        h = {"X-Workflow-Id": "loop", "X-Agent-Id": "coder", "X-Fake": "tool"}
        call(cl, h, tools=TOOLS)
        time.sleep(0.3)                                      # the tool runs
        call(cl, h, tools=TOOLS)
        call(cl, {"X-Workflow-Id": "loop", "X-Agent-Id": "coder"})      # no tools: no retention
        call(cl, {**h, "X-Workflow-End": "true"}, tools=TOOLS)         # the last call: none either
        first, second, plain, last = (engine_view(b)[1] for _, b, _ in up.requests)
        assert first.retain is None                          # nothing known of the agent yet
        assert second.retain is not None and second.retain.scope == "loop"
        (span,) = second.retain.spans
        assert (span.start, span.end, span.priority) == (0, None, 50) and 0.25 <= span.duration < 5
        assert plain.retain is None and last.retain is None
    finally:
        srv.stop()

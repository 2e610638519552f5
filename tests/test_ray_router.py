"""agentrt on Ray Serve: block ids, the KV-event mirror, the call preparer, the request router
over fake replicas (no Ray cluster), and one end-to-end run with a local Ray and two vLLM-CPU
replicas of the tiny model (slow).

The Ray tests skip when Ray is not installed (the `ray` extra); the end-to-end test also needs
vLLM (the `vllm` extra). CI installs both.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import signal
import time
import urllib.error
import urllib.request

import pytest

from agentrt.ray.blocks import block_hash, chain, salt_seed
from agentrt.ray.call import CHAT, COMPLETIONS, AgentCall, CallPreparer
from agentrt.ray.kv_events import KVEventListener, decode_batch
from agentrt.ray.replica_state import ReplicaState
from vllm_support import requires_vllm

HAVE_RAY = importlib.util.find_spec("ray") is not None
requires_ray = pytest.mark.skipif(
    not HAVE_RAY, reason='Ray is not installed (pip install -e ".[ray]" installs ray[serve])')
BS = 4
# Ray Serve's own config models trip pydantic's deprecation warnings on import
pytestmark = pytest.mark.filterwarnings("ignore:Using extra keyword arguments on `Field`")


def stored(hashes, parent, tokens, salt=None) -> dict:
    ev = {"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": parent,
          "token_ids": tokens, "block_size": BS, "medium": "GPU"}
    if salt is not None:
        ev["extra_keys"] = [(salt,)] + [None] * (len(hashes) - 1)
    return ev


# ---------------------------------------------------------------------------- block ids
def test_chain_covers_full_blocks_and_depends_on_prefix_and_salt():
    toks = list(range(10))
    ids = chain(toks, BS)
    assert len(ids) == 2                       # the partial third block is not cached by vLLM
    assert ids == chain(toks[:8], BS) and ids[0] == block_hash(0, toks[:4])
    assert ids[1] == block_hash(ids[0], toks[4:8])
    assert chain([9] + toks[1:], BS)[1] != ids[1]          # a changed prefix changes every later id
    assert chain(toks, BS, salt_seed("t1"))[0] != ids[0] and salt_seed(None) == salt_seed("") == 0
    with pytest.raises(ValueError):
        chain(toks, 0)


# ---------------------------------------------------------------------------- the mirror
def test_events_mirror_what_vllm_stores_and_evicts():
    s = ReplicaState(block_size=BS, capacity=16, events=True)
    toks = list(range(100, 112))
    ids = chain(toks, BS)
    s.apply([stored([901, 902], None, toks[:8]), stored([903], 902, toks[8:12])])
    assert s.cached_blocks("default", ids) == 3 and s.stored == 3 and s.free_blocks == 13
    assert s.cached_blocks("default", chain(toks[:4] + [0] * 8, BS)) == 1
    s.apply([{"type": "BlockRemoved", "block_hashes": [903], "medium": "GPU"}])
    assert s.cached_blocks("default", ids) == 2 and s.evicted_blocks == 1
    s.apply([stored([777], 555, toks[:4])])               # parent never seen: cannot be placed
    assert s.unresolved == 1
    s.apply([stored([1], None, toks[:4]), {"type": "BlockStored", "block_hashes": [2],
             "parent_block_hash": None, "token_ids": toks[:4], "block_size": BS, "medium": "CPU"}])
    assert s.stored == 4                                   # the offload tier is not GPU memory
    s.apply([{"type": "AllBlocksCleared"}])
    assert s.cached_blocks("default", ids) == 0 and not s.by_vllm


def test_salted_chains_stay_apart():
    s = ReplicaState(block_size=BS, events=True)
    toks = list(range(8))
    s.apply([stored([5, 6], None, toks, salt="tenant-a")])
    assert s.cached_blocks("a", chain(toks, BS, salt_seed("tenant-a"))) == 2
    assert s.cached_blocks("b", chain(toks, BS)) == 0


def test_provisional_blocks_bridge_the_event_lag_and_expire():
    s = ReplicaState(block_size=BS, capacity=8, events=True, provisional_s=5.0)
    ids = chain(list(range(12)), BS)
    s.tick(100.0)
    s.note_routed("r1", ids, 12)
    assert s.cached_blocks("default", ids) == 3 and s.running == 1 and s.queued_tokens == 12
    s.note_finished("r1")
    assert s.running == 0 and s.queued_tokens == 0
    s.tick(106.0)
    assert s.cached_blocks("default", ids) == 0           # never confirmed by an event
    s.note_routed("r2", ids, 12)
    s.apply([stored([1, 2, 3], None, list(range(12)))])   # confirmed: no longer provisional
    s.tick(1000.0)
    assert s.cached_blocks("default", ids) == 3 and not s.provisional


def test_model_without_events_evicts_least_recently_used_tails_first():
    s = ReplicaState(block_size=BS, capacity=4, events=False)
    a = chain(list(range(12)), BS)                         # 3 blocks
    b = chain(list(range(50, 58)), BS)                     # 2 blocks
    s.note_routed("a", a, 12)
    s.note_routed("b", b, 8)
    assert s.evicted_blocks == 1 and s.free_blocks == 0
    assert s.cached_blocks("default", a) == 2              # a's tail went first, as vLLM frees it
    assert s.cached_blocks("default", b) == 2


# ---------------------------------------------------------------------------- KV events on the wire
def _encode(batch_events) -> bytes:
    """An event batch in vLLM's wire shape: `[ts, events]`, events as maps tagged by `type`."""
    import msgspec
    return msgspec.msgpack.encode([time.time(), batch_events])


@pytest.mark.slow
@requires_vllm
def test_decoder_reads_what_vllm_encodes():
    """The decoder against vLLM's own event classes and encoder (slow: it imports vLLM)."""
    import msgspec
    from vllm.distributed.kv_events import AllBlocksCleared, BlockRemoved, BlockStored, KVEventBatch
    toks = list(range(8))
    batch = KVEventBatch(ts=time.time(), events=[
        BlockStored(block_hashes=[11, 12], parent_block_hash=None, token_ids=toks, block_size=BS,
                    lora_id=None, medium="GPU", lora_name=None, extra_keys=[("salt-1",), None]),
        BlockRemoved(block_hashes=[12], medium="GPU"), AllBlocksCleared()])
    events = decode_batch(msgspec.msgpack.Encoder().encode(batch))
    assert [e["type"] for e in events] == ["BlockStored", "BlockRemoved", "AllBlocksCleared"]
    s = ReplicaState(block_size=BS, events=True)
    s.apply(events[:2])
    assert s.cached_blocks("t", chain(toks, BS, salt_seed("salt-1"))) == 1 and s.evicted_blocks == 1


def test_listener_decodes_vllm_batches_and_counts_gaps(tmp_path):
    zmq = pytest.importorskip("zmq")
    endpoint = f"ipc://{tmp_path / 'kv.sock'}"
    pub = zmq.Context.instance().socket(zmq.PUB)
    pub.bind(endpoint)
    listener = KVEventListener(poll_ms=10)
    try:
        listener.subscribe("r0", endpoint)
        toks = list(range(8))
        batch = _encode([stored([11, 12], None, toks), {"type": "BlockRemoved", "block_hashes": [12]}])
        got: list = []
        deadline = time.time() + 10
        seq = 0
        while not got and time.time() < deadline:   # a SUB joins asynchronously: publish until heard
            pub.send_multipart([b"", seq.to_bytes(8, "big"), batch])
            seq += 1
            time.sleep(0.05)
            got = listener.drain()
        assert got, "no KV event batch reached the listener"
        key, events = got[0]
        assert key == "r0" and [e["type"] for e in events] == ["BlockStored", "BlockRemoved"]
        s = ReplicaState(block_size=BS, events=True)
        s.apply(events)
        assert s.cached_blocks("default", chain(toks, BS)) == 1 and s.evicted_blocks == 1
        listener.drain()
        base = listener.gaps.get("r0", 0)
        pub.send_multipart([b"", (seq + 5).to_bytes(8, "big"), batch])   # 5 batches lost
        deadline = time.time() + 5
        while listener.gaps.get("r0", 0) == base and time.time() < deadline:
            time.sleep(0.02)
        assert listener.gaps["r0"] - base == 5
        assert decode_batch(_encode([])) == []
    finally:
        listener.close()
        pub.close(linger=0)


# ---------------------------------------------------------------------------- the call preparer
class FakeTokenizer:
    """One token per character of a rendered chat (enough to check blocks and identity)."""

    def apply_chat_template(self, messages, tools=None, add_generation_prompt=True, tokenize=True):
        text = "".join(f"<{m['role']}>{m['content']}" for m in messages) + ("<assistant>" if add_generation_prompt else "")
        return [ord(c) for c in text]

    def encode(self, text):
        return [ord(c) for c in text]


def chat(system: str, user: str, **extra) -> dict:
    return {"model": "m", "messages": [{"role": "system", "content": system},
                                       {"role": "user", "content": user}], "max_tokens": 3, **extra}


def test_preparer_identity_blocks_and_counters():
    prep = CallPreparer(FakeTokenizer(), block_size=BS, max_workflows=2)
    body = chat("plan well", "task one")
    c1 = prep.prepare(CHAT, body, {"x-workflow-id": "wf", "x-agent-id": "planner"})
    assert (c1.workflow, c1.agent, c1.tenant, c1.call_index, c1.end) == ("wf", "planner", "default", 0, False)
    toks = FakeTokenizer().apply_chat_template(body["messages"])
    assert c1.prompt_tokens == len(toks) and c1.hash_ids == chain(toks, BS)
    assert c1.body["session_id"] == "wf" and c1.body["vllm_xargs"]["agentrt_agent"] == "planner"
    assert c1.messages is c1.body["messages"] and "session_id" not in body   # the client's body is untouched
    r = c1.route_request()
    assert (r.workflow, r.agent, r.output_tokens, r.last) == ("wf", "planner", 3, False)
    c2 = prep.prepare(CHAT, chat("plan well", "task one", metadata={"workflow_end": True}),
                      {"x-workflow-id": "wf"})
    assert c2.call_index == 1 and c2.end and c2.agent.startswith("anchor:")   # agent from the prompt
    assert prep.tracked_workflows() == 0                                     # ended: counter dropped
    c3 = prep.prepare(CHAT, chat("s", "u", session_id="sess-1"), {"x-tenant-id": "t1"})
    assert (c3.workflow, c3.tenant) == ("t1/sess-1", "t1")
    for w in ("a", "b", "c"):
        prep.prepare(CHAT, chat("s", "u"), {"x-workflow-id": w})
    assert prep.tracked_workflows() == 2                                     # bounded
    c4 = prep.prepare(COMPLETIONS, {"prompt": [1, 2, 3, 4, 5]}, {})
    assert c4.prompt_tokens == 5 and c4.hash_ids == chain([1, 2, 3, 4, 5], BS)
    assert c4.workflow.startswith("call:") and c4.end


def test_preparer_refuses_bad_identity():
    from agentrt.serve.validate import RequestError
    prep = CallPreparer(FakeTokenizer(), block_size=BS)
    with pytest.raises(RequestError):
        prep.prepare(CHAT, chat("s", "u"), {"x-tenant-id": "bad tenant!"})


# ---------------------------------------------------------------------------- the Ray request router
class FakeReplica:
    """What Ray's `RunningReplica` offers a request router, without an actor behind it."""

    def __init__(self, uid: str, meta: dict | None = None) -> None:
        from ray.serve._private.common import DeploymentID, ReplicaID
        self.replica_id = ReplicaID(uid, DeploymentID(name="vllm", app_name="app"))
        self.replica_metadata = meta or {}
        self.max_ongoing_requests = 8
        self.multiplexed_model_ids: set = set()
        self.node_id, self.availability_zone = "node", None

    async def get_queue_len(self, *, deadline_s: float) -> int:
        return 0


def make_router(router: str, replicas, **kw):
    from ray.serve._private.common import DeploymentHandleSource, DeploymentID

    from agentrt.ray.router import AgentRTRequestRouter
    r = AgentRTRequestRouter(deployment_id=DeploymentID(name="vllm", app_name="app"),
                             handle_source=DeploymentHandleSource.UNKNOWN)
    r.initialize_state(router=router, block_size=BS, **kw)
    r.update_replicas(replicas)
    return r


_ids = iter(range(1 << 30))


def pending(call):
    from ray.serve._private.common import RequestMetadata
    from ray.serve.request_router import PendingRequest
    n = next(_ids)
    return PendingRequest(args=[call], kwargs={}, metadata=RequestMetadata(f"req{n}", f"internal{n}"))


def agent_call(workflow: str, tokens: list[int], end: bool = False) -> AgentCall:
    return AgentCall(path=CHAT, body={}, tenant="default", workflow=workflow, agent="a", end=end,
                     call_index=0, hash_ids=chain(tokens, BS), prompt_tokens=len(tokens))


async def send(router, call) -> tuple:
    """Route one call as Ray would: choose, accept on the first tier, report routed."""
    pr = pending(call)
    tiers = await router.choose_replicas(list(router.curr_replicas.values()), pr)
    chosen = tiers[0][0]
    router.on_request_routed(pr, chosen.replica_id, None)
    return pr, chosen, tiers


@requires_ray
def test_router_follows_workflows_and_reports_their_ends():
    async def run():
        reps = [FakeReplica("a"), FakeReplica("b")]
        r = make_router("session", reps, kv_events=False)
        toks = list(range(16))
        pr1, first, tiers = await send(r, agent_call("w1", toks))
        assert [len(t) for t in tiers] == [1, 1]             # every replica, best first, one per tier
        pr2, other, _ = await send(r, agent_call("w2", list(range(50, 66))))
        assert other is not first                             # the second workflow goes to the idle one
        r.on_request_completed(first.replica_id, pr1.metadata.internal_request_id)
        _, again, _ = await send(r, agent_call("w1", toks + [1, 2, 3, 4], end=True))
        assert again is first and r.router.state_size() == 2
        # the model without events holds what was routed there: the follow-up's prefix is cached
        assert r.states[first.replica_id].cached_blocks("default", chain(toks, BS)) == 4
        for key, (_, rid, _) in list(r.inflight.items()):
            r.on_request_completed(rid, key)
        assert not r.inflight and r.router.state_size() == 1   # w1 ended, w2 is still live
        st = r.stats()
        assert st["decisions"] == 3 and [x["slot"] for x in st["replicas"]] == [0, 1]
    asyncio.run(run())


@requires_ray
def test_prefix_router_reads_the_event_mirror():
    async def run():
        reps = [FakeReplica("a"), FakeReplica("b")]
        r = make_router("prefix", reps, kv_events=False, router_options={"match_threshold": 0.5})
        toks = list(range(200, 216))
        # replica b's vLLM reports these blocks (events fed straight into its state here)
        r.states[reps[1].replica_id].events = True
        r.states[reps[1].replica_id].apply([stored([1, 2, 3, 4], None, toks)])
        for _ in range(3):
            pr, chosen, _ = await send(r, agent_call(f"x{_}", toks + [7]))
            assert chosen is reps[1]
            r.on_request_completed(chosen.replica_id, pr.metadata.internal_request_id)
    asyncio.run(run())


@requires_ray
def test_router_keeps_slots_stable_across_replica_changes_and_passes_foreign_calls():
    async def run():
        a, b, c = FakeReplica("a"), FakeReplica("b"), FakeReplica("c")
        r = make_router("session", [a, b], kv_events=False)
        _, home, _ = await send(r, agent_call("w", list(range(8))))
        gone = home
        stay = b if home is a else a
        r.update_replicas([stay])
        assert None in r.slots and gone.replica_id not in r.states
        pr, chosen, tiers = await send(r, agent_call("w", list(range(8))))
        assert chosen is stay and len(tiers) == 1              # the empty slot is never offered
        r.update_replicas([stay, c])
        assert r.slots.index(c.replica_id) == [a, b].index(gone)   # the new replica reuses the slot
        foreign = pending({"messages": []})
        assert await r.choose_replicas([stay, c], foreign) == [[stay, c]]   # Ray's least-queue choice
        r.on_request_completed(stay.replica_id, "never-routed")           # a rejected request: ignored
    asyncio.run(run())


@requires_ray
def test_router_subscribes_to_replica_endpoints(tmp_path):
    async def run():
        meta = {"kv_events": f"ipc://{tmp_path / 'a.sock'}", "block_size": BS, "num_blocks": 64}
        reps = [FakeReplica("a", meta), FakeReplica("b")]
        r = make_router("agent", reps)
        try:
            sa, sb = r.states[reps[0].replica_id], r.states[reps[1].replica_id]
            assert sa.events and sa.capacity == 64 and not sb.events
            assert r.subscribed == {reps[0].replica_id: meta["kv_events"]}
            r.update_replicas([reps[1]])
            assert not r.subscribed
        finally:
            r.listener.close()
    asyncio.run(run())


def test_unknown_router_is_refused():
    pytest.importorskip("ray.serve", reason="Ray is not installed")
    from agentrt.errors import AgentrtError
    from agentrt.ray.deploy import router_config
    with pytest.raises(AgentrtError):
        router_config("no-such-router")
    with pytest.raises(ValueError):
        router_config("ray:no-such")
    assert router_config("ray:pow2").request_router_kwargs == {}
    cfg = router_config("agent", {"seed": 1}, block_size=16)
    assert cfg.request_router_kwargs["block_size"] == 16 and cfg.request_router_kwargs["router"] == "agent"
    assert cfg.request_router_kwargs["transfer_tokens_per_s"] == 0.0
    cfg = router_config("agent", transfer_tokens_per_s=38_000.0)
    assert cfg.request_router_kwargs["transfer_tokens_per_s"] == 38_000.0

    async def run():      # Ray's router wants a running event loop
        r = make_router("agent", [], kv_events=False, transfer_tokens_per_s=38_000.0)
        assert r.router.hints.transfer_tokens_per_s == 38_000.0
    asyncio.run(run())


# ---------------------------------------------------------------------------- end to end
def _settle(port: int, timeout_s: float = 10.0) -> None:
    """Wait until the router has seen every call finish. Ray reports a completion through a
    callback on the result that may run after the reply reached the client; until then the
    router counts the call as running on its replica (one decode step of wait), which can
    outweigh a short cached prefix and send the next call elsewhere. The affinity asserted
    here is the idle-home case."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        stats = _router_stats(port)
        if all(x is None or x["inflight"] == 0 for s in stats for x in s["replicas"]):
            return
        time.sleep(0.05)
    # a completion Ray never reported is a leak in the router's state, not a slow callback
    raise AssertionError(f"the router still counts calls in flight after {timeout_s:g} s: {stats}")


def _router_stats(port: int) -> list:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/agentrt/router", timeout=30) as r:
        return json.loads(r.read())


def _post(url: str, body: dict, headers: dict) -> tuple[dict, dict]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json", **headers})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read()), {k.lower(): v for k, v in r.headers.items()}


@pytest.mark.slow
@requires_ray
@requires_vllm
def test_two_vllm_replicas_on_ray_serve_follow_workflows(tiny_model):
    """Two workflows, three calls each, through Serve's HTTP proxy: every later call lands on the
    replica that served its workflow's first call and hits vLLM's prefix cache there (vLLM's own
    `cached_tokens`), the router tokenizes as vLLM does, and its mirror is fed by KV events."""
    from ray import serve

    from agentrt.ray.deploy import EngineSpec, build_app, local_ray
    from agentrt.local.launch import free_port

    t0 = time.time()
    port = free_port()
    local_ray(num_cpus=2, http_port=port)
    pids: list[int] = []
    try:
        spec = EngineSpec(model=tiny_model, block_size=32, num_blocks=128)
        serve.run(build_app(spec, replicas=2, router="agent"), name="agentrt", route_prefix="/")
        startup = time.time() - t0
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        system = {"planner": "You plan the work for a team of coding agents. " * 12}
        homes: dict[str, str] = {}
        for step in range(3):
            for wf in ("wf-a", "wf-b"):
                msgs = [{"role": "system", "content": system["planner"]},
                        {"role": "user", "content": f"Task {wf}: fix the failing test in module {wf}. " * 8}]
                for k in range(step):
                    msgs += [{"role": "assistant", "content": f"step {k} done"},
                             {"role": "user", "content": f"tool output {k} for {wf} " * 6}]
                _settle(port)
                out, hdr = _post(url, {"model": "agentrt", "messages": msgs, "max_tokens": 4},
                                 {"x-workflow-id": wf, "x-agent-id": "planner"})
                usage = out["usage"]
                assert int(hdr["x-agentrt-prompt-tokens"]) == usage["prompt_tokens"]   # same tokens as vLLM
                if step == 0:
                    homes[wf] = hdr["x-agentrt-replica"]
                    continue
                assert hdr["x-agentrt-replica"] == homes[wf], \
                    f"{wf} call {step} left its replica: {_router_stats(port)}"
                cached = usage["prompt_tokens_details"]["cached_tokens"]
                assert cached >= 32 * 8, f"{wf} call {step}: only {cached} cached tokens"
        # a streamed call of wf-a: same replica, vLLM's events as they come, its cache hit
        msgs = [{"role": "system", "content": system["planner"]},
                {"role": "user", "content": "Task wf-a: fix the failing test in module wf-a. " * 8}]
        _settle(port)
        req = urllib.request.Request(url, data=json.dumps(
            {"model": "agentrt", "messages": msgs, "max_tokens": 4, "stream": True,
             "stream_options": {"include_usage": True}}).encode(),
            headers={"content-type": "application/json", "x-workflow-id": "wf-a", "x-agent-id": "planner"})
        with urllib.request.urlopen(req, timeout=120) as r:
            assert r.headers["content-type"].startswith("text/event-stream")
            assert r.headers["x-agentrt-replica"] == homes["wf-a"], _router_stats(port)
            events = [line[6:] for line in r.read().decode().splitlines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]", events
        chunks = [json.loads(e) for e in events[:-1]]
        assert any(c["choices"] and c["choices"][0]["delta"].get("content") is not None for c in chunks)
        usage = [c["usage"] for c in chunks if c.get("usage")][-1]
        assert usage["prompt_tokens_details"]["cached_tokens"] >= 32 * 8, usage
        # an upstream error on a streamed call comes back whole, as JSON, with its status
        bad = urllib.request.Request(url, data=json.dumps(
            {"model": "no-such-model", "messages": msgs, "stream": True}).encode(),
            headers={"content-type": "application/json", "x-workflow-id": "wf-c"})
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(bad, timeout=120)
        assert err.value.code == 404 and "error" in json.loads(err.value.read())
        # the ingress's own checks answer with a 400 naming the field
        for body, needle in ((b"{not json", "not valid JSON"), (b'{"model": "agentrt"}', "'messages'")):
            with pytest.raises(urllib.error.HTTPError) as err:
                urllib.request.urlopen(urllib.request.Request(
                    url, data=body, headers={"content-type": "application/json"}), timeout=60)
            assert err.value.code == 400 and needle in json.loads(err.value.read())["error"]["message"]
        stats = _router_stats(port)
        assert stats and stats[0]["decisions"] >= 6, stats
        reps = [x for s in stats for x in s["replicas"] if x]
        assert len(reps) == 2 and all(x["events"] and x["unresolved"] == 0 for x in reps), stats
        served = [x for x in reps if x["replica"] in homes.values()]
        assert served and all(x["stored"] > 0 and x["resident"] > 0 for x in served), stats
        pids = [x["metadata"]["engine_pid"] for x in reps]
        print(f"ray+serve+2 vLLM startup {startup:.1f}s, total {time.time() - t0:.1f}s")
    finally:
        serve.shutdown()
        import ray
        ray.shutdown()
        for pid in pids:                               # engines of replicas killed without cleanup
            try:
                os.killpg(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass


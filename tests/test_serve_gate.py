"""The admission gate of `agentrt serve --scheduler` (serve/gate.py), deterministic: the bridge
with a clock the test moves and an engine load the test sets (no scrape), so each pass releases
exactly what the rules say. The HTTP-level behaviour (429, disconnects, the scrape) is in
test_serve_gate_http.py.
"""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("prometheus_client", reason="the serve extra is not installed")

from agentrt.serve.engine_load import EngineLoad, parse_load  # noqa: E402
from agentrt.serve.identity import resolve_identity  # noqa: E402
from agentrt.serve.runtime_bridge import RuntimeBridge  # noqa: E402

BLOCK_TOKENS = 64               # the default 256 characters per block, 4 a token
USAGE = {"prompt_tokens": 400, "completion_tokens": 40, "prompt_tokens_details": {"cached_tokens": 0}}


class Cost:
    """A preset's cost model stand-in: 10 ms a prompt token."""

    @staticmethod
    def prefill(tokens: int, cached: int) -> float:
        return 0.01 * tokens


class Rig:
    """A bridge with a scheduler, its gate, a clock and the engine's load, all set by the test."""

    def __init__(self, scheduler: str = "las", capacity_blocks: int = 1000, **kw) -> None:
        self.now = 100.0
        self.b = RuntimeBridge("lru", clock=lambda: self.now, scheduler=scheduler,
                               kv_capacity_tokens=capacity_blocks * BLOCK_TOKENS, **kw)
        self.gate = self.b.gate
        self.engine()

    def engine(self, running: int = 0, waiting: int = 0, usage: float = 0.0, ok: bool = True) -> None:
        """The engine as a scrape just read it."""
        self.gate.load = EngineLoad(running, waiting, usage, self.now, ok)

    def call(self, wf: str, text: str = "go", tenant: str = "default", system: str = "sys " * 40,
             end: bool = False, max_tokens: int = 8):
        body = {"model": "m", "max_tokens": max_tokens,
                "messages": [{"role": "system", "content": system}, {"role": "user", "content": f"{wf} {text}"}]}
        ident = resolve_identity({"x-workflow-id": wf, "x-agent-id": "a", "x-tenant-id": tenant,
                                  "x-workflow-end": str(end).lower()}, body, 0)
        return self.b.arrive("/v1/chat/completions", body, ident)

    def released(self) -> list:
        """The gate's in-flight calls, in the order it released them (their workflows)."""
        return [t.info.workflow for t in self.gate.inflight.values()]

    def finish(self, call, usage=USAGE) -> None:
        self.b.finish(call, 200, usage)


def run(coro):
    return asyncio.run(coro)


def test_metrics_parse_sums_engines_and_ignores_junk():
    text = ('vllm:num_requests_running{engine="0"} 2.0\nvllm:num_requests_running{engine="1"} 1\n'
            'vllm:num_requests_waiting{engine="0"} NaN\nvllm:num_requests_waiting{engine="1"} 3\n'
            'vllm:kv_cache_usage_perc{engine="0"} 0.5\nvllm:kv_cache_usage_perc{engine="1"} 0.7\n'
            'vllm:kv_cache_usage_perc_x 9\n# comment\ngarbage line\n'
            'vllm:cache_config_info{block_size="32",num_gpu_blocks="100"} 1.0\n')
    load = parse_load(text, 5.0)
    assert (load.running, load.waiting, round(load.usage, 3), load.ok, load.capacity_tokens) == (3, 3, 0.6, True, 3200)
    assert not parse_load("nothing here", 0.0).ok


def test_fcfs_has_no_gate():
    assert RuntimeBridge("lru").gate is None


def test_calls_wait_while_the_engine_queue_is_busy_then_go_in_las_order():
    async def go():
        r = Rig("las")
        first = r.call("w1", "one")                     # the engine is idle: it goes at once
        await asyncio.sleep(0)
        assert r.released() == ["w1"] and first.ticket.reason == "room"
        r.now += 1
        r.finish(first)                                 # w1 has attained service now
        r.engine(running=2, waiting=1)                  # vLLM's own queue is not empty
        calls = [r.call("w1", "two"), r.call("w2"), r.call("w3")]
        await asyncio.sleep(0)
        assert r.released() == [] and len(r.gate.held) == 3
        r.now += 0.01
        r.engine(running=2, waiting=0)
        assert r.gate.release_pass() == 3
        # least attained service first: the new workflows, in arrival order, then w1
        assert r.released() == ["w2", "w3", "w1"]
        assert all(c.ticket.priority is not None for c in calls)
        assert calls[0].ticket.priority > calls[1].ticket.priority
    run(go())


def test_a_stale_load_with_calls_in_flight_waits_for_the_scrape():
    async def go():
        r = Rig("las")
        r.call("w1")
        await asyncio.sleep(0)
        r.now += 5                                      # the last scrape is old, w1 is in flight
        r.call("w2")
        await asyncio.sleep(0)
        assert r.released() == ["w1"]
        r.engine()
        assert r.gate.release_pass() == 1 and r.released() == ["w1", "w2"]
    run(go())


def test_memory_room_counts_what_was_released_since_the_scrape():
    async def go():
        r = Rig("las", capacity_blocks=20)
        r.engine(running=1, usage=0.5)                  # 10 of 20 blocks held by running requests
        calls = [r.call(f"w{i}", system=f"agent {i} " * 80) for i in range(4)]
        await asyncio.sleep(0)
        need = calls[0].sched_info.n_full               # nothing cached: the whole prompt
        assert 10 // need == len(r.released()) >= 1     # only what fits in the 10 free blocks
        r.now += 0.05
        r.engine(running=3, usage=0.5 + len(r.released()) * need / 20)
        assert r.gate.release_pass() == 0               # the scrape shows them holding it
    run(go())


def test_failed_scrape_releases_every_held_call_in_order():
    async def go():
        r = Rig("las")
        r.engine(waiting=1)
        for wf in ("a", "b"):
            r.call(wf)
        await asyncio.sleep(0)
        assert r.released() == []
        r.engine(ok=False)
        assert r.gate.release_pass() == 2
        assert [t.reason for t in r.gate.inflight.values()] == ["unmeasured"] * 2
    run(go())


def test_every_call_leaves_within_the_queue_bound():
    async def go():
        r = Rig("las", gate_options={"max_queue_s": 30})
        r.engine(waiting=1)
        c = r.call("w")
        await asyncio.sleep(0)
        r.now += 29
        r.engine(waiting=1)
        assert r.gate.release_pass() == 0
        r.now += 1
        r.engine(waiting=1)                             # vLLM is still full: it goes anyway
        assert r.gate.release_pass() == 1 and c.ticket.reason == "bound"
    run(go())


def _live_workflow(r: Rig, wf: str, system: str):
    """A workflow whose first call ran: its context is live in the agent scheduler."""
    c = r.call(wf, system=system)
    assert c.ticket is not None
    return c


def test_agent_holds_a_new_workflow_at_the_door_while_live_contexts_fill_the_pool():
    async def go():
        big = "context " * 300                           # about 10 blocks of 256 characters
        r = Rig("agent", capacity_blocks=14, prefill_cost=Cost())
        c1 = _live_workflow(r, "w1", big)
        await asyncio.sleep(0)
        assert r.released() == ["w1"]
        r.now += 1
        r.b.answering(c1)
        r.finish(c1)                                     # w1 waits on a tool; its context stays live
        r.engine()
        new = r.call("w2", system="other " * 300)        # a new workflow would evict w1's context
        await asyncio.sleep(0)
        assert r.released() == [] and new.ticket.deferred
        r.now += 1
        again = r.call("w1", "next", system=big)         # a live workflow's call is never held for this
        await asyncio.sleep(0)
        assert r.released() == ["w1"]
        r.now += 1
        r.finish(again)
        r.engine()
        r.b.end_workflow("w1")                           # w1 ends: its context leaves the pool
        await asyncio.sleep(0)
        assert r.released() == ["w2"] and new.ticket.reason == "room"
    run(go())


def test_a_held_workflow_goes_at_its_hold_bound():
    async def go():
        big = "context " * 300
        r = Rig("agent", capacity_blocks=14, scheduler_options={"max_hold_s": 20, "max_wait_s": 5},
                prefill_cost=Cost())
        c1 = _live_workflow(r, "w1", big)
        await asyncio.sleep(0)
        r.finish(c1)
        r.engine()
        new = r.call("w2", system="other " * 300)
        await asyncio.sleep(0)
        assert r.released() == []
        r.now += 21
        r.engine()
        assert r.gate.release_pass() == 1 and new.ticket.reason == "hold_bound"
    run(go())


def test_a_full_gate_refuses_and_a_smaller_tenant_pushes_the_largest_ones_newest_out():
    async def go():
        r = Rig("las", gate_options={"max_held": 3})
        r.engine(waiting=1)
        a = [r.call(f"a{i}", tenant="A") for i in range(3)]
        await asyncio.sleep(0)
        assert len(r.gate.held) == 3
        assert not r.gate.room_for("A")                   # full, and A holds the most
        assert r.gate.room_for("B")                       # B holds none: A's newest call goes
        assert a[2].ticket.reason == "full" and len(r.gate.held) == 2
        r.call("b0", tenant="B")
        assert not r.gate.room_for("B")                   # 2 against B's 1 + 1: no more
        r.b.finish(a[2], 429, None)                       # its handler answered 429
        assert r.gate.metrics._rejected.labels("las", "A")._value.get() == 1
    run(go())


def test_per_tenant_bound():
    async def go():
        r = Rig("las", gate_options={"max_held": 10, "max_held_per_tenant": 2})
        r.engine(waiting=1)
        r.call("a0", tenant="A")
        r.call("a1", tenant="A")
        assert not r.gate.room_for("A") and r.gate.room_for("B")
    run(go())


def test_a_client_that_leaves_while_held_is_removed_at_once():
    async def go():
        r = Rig("fair")
        r.engine(waiting=1)
        c = r.call("w")
        other = r.call("v")
        await asyncio.sleep(0)
        r.gate.leave(c.ticket)
        assert c.ticket.reason == "gone" and list(r.gate.held) == [other.sched_info.rid]
        r.b.finish(c, "gone", None)
        s = r.gate.sched.sched
        assert c.sched_info.rid not in s.tags              # the scheduler forgot it too
    run(go())


def _one_per_scrape(r: Rig, n: int) -> list[str]:
    out = []
    for _ in range(n):
        r.now += 0.1
        r.gate.load = EngineLoad(0, 0, 0.0, r.now, True)
        r.gate.release_pass()
        out = r.released()
    return out


@pytest.mark.parametrize("tenant_fair", [False, True])
def test_one_tenants_burst_cannot_push_another_tenants_held_calls_back(tenant_fair):
    async def go():
        r = Rig("las", capacity_blocks=0, tenant_fair=tenant_fair)    # unknown pool: one per scrape
        r.engine(waiting=1)
        for i in range(6):
            r.call(f"a{i}", tenant="A")
            r.now += 0.01
        for i in range(2):
            r.call(f"b{i}", tenant="B")
        await asyncio.sleep(0)
        order = _one_per_scrape(r, 4)
        return order
    order = run(go())
    if tenant_fair:
        assert order[:4] == ["A/a0", "B/b0", "A/a1", "B/b1"]
    else:                                            # las alone: arrival order among equals
        assert order[:4] == ["A/a0", "A/a1", "A/a2", "A/a3"]


def test_fair_scheduler_interleaves_tenants_by_itself():
    async def go():
        r = Rig("fair", capacity_blocks=0)
        r.engine(waiting=1)
        for i in range(6):
            r.call(f"a{i}", tenant="A")
        r.call("b0", tenant="B")
        await asyncio.sleep(0)
        return _one_per_scrape(r, 3)
    assert "B/b0" in run(go())[:2]


def test_a_scheduler_bug_releases_the_held_calls():
    async def go():
        r = Rig("las")
        r.engine(waiting=1)
        c = r.call("w")
        await asyncio.sleep(0)

        def broken(*a):
            raise RuntimeError("boom")
        r.gate.sched.order = broken
        r.gate._safe_pass()
        assert c.ticket.reason == "unranked"
        assert r.b.runtime.errors == 1
    run(go())


def test_state_shows_the_gate():
    async def go():
        r = Rig("agent")
        r.engine(waiting=1)
        r.call("w")
        await asyncio.sleep(0)
        g = r.b.state()["scheduler"]["gate"]
        assert g["held"] == 1 and g["engine"]["waiting"] == 1 and g["capacity_blocks"] == 1000
    run(go())


def test_the_accounting_returns_to_zero_when_every_call_has_ended():
    async def go():
        r = Rig("fair", capacity_blocks=50)
        r.engine(waiting=1)
        calls = [r.call(f"w{i}", tenant="AB"[i % 2]) for i in range(6)]
        await asyncio.sleep(0)
        r.engine()
        r.gate.release_pass()
        assert r.gate.reserved_blocks() > 0 and r.gate.tenant_running_blocks("A") > 0
        r.b.answering(calls[0])                          # its prompt is computed: only its output stays
        for c in calls:
            r.finish(c)
        assert (r.gate.reserved_blocks(), r.gate.running_blocks, r.gate.inflight, r.gate.held) == (0, {}, {}, {})
    run(go())


def test_a_known_running_cap_counts_the_calls_released_since_the_scrape():
    async def go():
        r = Rig("las", gate_options={"max_running": 3})
        r.engine(running=1)
        for wf in ("a", "b", "c", "d"):
            r.call(wf)
        await asyncio.sleep(0)
        assert r.released() == ["a", "b"]                # 1 running + 2 released: the cap
    run(go())

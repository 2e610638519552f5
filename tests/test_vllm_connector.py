"""The agentrt KV connector for vLLM: identity, mirror, free-queue order, failure, and a live server.

Three layers: plain unit tests (no vLLM), tests on a real vLLM `BlockPool` without a server (the
connector's scheduler logic end to end, fast), and integration tests against a real vLLM server
with the tiny local model (session-scoped servers, stopped by PID).
"""

from __future__ import annotations

import json
import random
import sys
import types
from types import SimpleNamespace

import pytest

from agentrt.cache.block import GPU
from agentrt.vllm.config import ConnectorConfig, kv_transfer_config
from agentrt.wire.identity import identity_of, xargs_for
from agentrt.vllm.mirror import Mirror, hash_int
from vllm_support import connector_server, requires_vllm

BS = 32


# ---------------------------------------------------------------------------- identity, config
def test_identity_from_xargs_session_and_fallback():
    x = xargs_for("wf1", "coder", "t1", 3, end=True, tool_call=True)
    i = identity_of("r1", x, None)
    assert (i.workflow, i.agent, i.tenant, i.call, i.end, i.tool_call, i.explicit) == \
        ("wf1", "coder", "t1", 3, True, True, True)
    i = identity_of("r2", {"agentrt_end": "false"}, "sess-9")
    assert (i.workflow, i.agent, i.tenant, i.end, i.explicit) == ("sess-9", None, "default", False, True)
    i = identity_of("r3", None, None)   # no identity: its own workflow, ended when it finishes
    assert (i.workflow, i.end, i.explicit) == ("req:r3", True, False)
    assert identity_of("r4", {"agentrt_call": "x", "agentrt_end": "true"}, "s").call is None


def test_config_parsing_and_transfer_config():
    cfg, unknown = ConnectorConfig.from_extra({"policy": "pbkv-lae", "bogus": 1, "plugins": "m"})
    assert cfg.policy == "pbkv-lae" and unknown == ["bogus"] and cfg.plugins == ["m"]
    assert ConnectorConfig.from_extra({})[0].stock
    kv = kv_transfer_config("cachesage", options={"lookahead": 2}, event_log=None)
    assert kv["kv_connector"] == "AgentRTConnector" and kv["kv_role"] == "kv_producer"
    assert kv["kv_connector_extra_config"] == {"policy": "cachesage", "options": {"lookahead": 2}}
    with pytest.raises(ValueError):
        kv_transfer_config("lru", host_blocks=-1)
    assert kv_transfer_config("lru", host_blocks=8)["kv_role"] == "kv_both"   # it loads KV into blocks
    assert ConnectorConfig.from_extra({})[0].stats_interval_s == 0.5
    assert ConnectorConfig.from_extra({})[0].rerank_duty == 0.02
    with pytest.raises(ValueError, match="rerank_duty"):
        kv_transfer_config("pbkv-ta", rerank_duty=0)
    with pytest.raises(ValueError, match="stats_interval_s"):
        kv_transfer_config("lru", stats_interval_s=-1)


# ---------------------------------------------------------------------------- mirror (fake blocks)
def _blk(bid: int, h: bytes | None):
    return SimpleNamespace(block_id=bid, block_hash=h, is_null=False)


def _h(i: int) -> bytes:
    return i.to_bytes(32, "big") + b"\0\0\0\0"


def test_mirror_paths_touch_order_and_evictions():
    m = Mirror()
    node, fresh = m.add_path([_blk(1, _h(10)), _blk(2, _h(11)), _blk(3, None)], "default")
    assert fresh == [1, 2] and node.hash == hash_int(_h(11)) and node.parent.hash == hash_int(_h(10))
    # deepest touched first, as vLLM frees (and LRU-queues) a request's blocks
    assert node.last_touch < node.parent.last_touch
    assert m.lookup([hash_int(_h(10)), hash_int(_h(11)), 5]) is node and m.prefix([hash_int(_h(10))]) == 1
    # the parent is evicted first: the child is an orphan until the parent's hash comes back
    assert m.evict_block(1).hash == hash_int(_h(10))
    assert m.prefix([hash_int(_h(10)), hash_int(_h(11))]) == 0
    again, fresh = m.add_path([_blk(7, _h(10)), _blk(2, _h(11))], "default")
    assert again is node and fresh == [7] and m.prefix([hash_int(_h(10)), hash_int(_h(11))]) == 2
    # a second physical copy of one hash keeps the node until both copies are gone
    m.add_path([_blk(8, _h(10))], "default")
    assert m.evict_block(7) is None and m.evict_block(8) is not None
    assert len(m.clear()) == 1 and len(m) == 0


# ---------------------------------------------------------------------------- real BlockPool, no server
class PoolHarness:
    """vLLM's real BlockPool driven like the scheduler drives it, with the connector's runtime; with
    a host tier, a fake KV tensor and the real worker-side copies, so data can be checked."""

    def __init__(self, policy: str, num_blocks: int = 64, **extra) -> None:
        from vllm.v1.core.block_pool import BlockPool
        from agentrt.vllm.eventlog import EventLog
        from agentrt.vllm.hosted import HostedRuntime
        self.pool = BlockPool(num_gpu_blocks=num_blocks, enable_caching=True, hash_block_size=BS)
        cfg, _ = ConnectorConfig.from_extra({"policy": policy, **extra})
        self.h = HostedRuntime(cfg, BS, EventLog(None, "scheduler"))
        self.h.bind_pool(self.pool)
        # a clock on which a re-rank costs nothing and order calls are far apart: every epoch
        # re-ranks at once (DUTY never defers), so the order is the same on any machine
        orderer = self.h.orderer
        orderer.clock = lambda: 1e6 * orderer.stats.runs
        self.n = 0
        self.buffers = None
        self.loaded_ok = 0
        if cfg.host_blocks:
            import torch
            from agentrt.vllm.worker import HostBuffers
            self.kv = torch.zeros(num_blocks, 2, 8)
            self.buffers = HostBuffers({"layer0": self.kv}, num_blocks, cfg.host_blocks)

    @staticmethod
    def content(h: bytes):
        import torch
        return torch.tensor(list(h[:16]), dtype=torch.float32).reshape(2, 8)

    def _g(self, fn, *args, default=None):
        """What the connector's hook wrapper does: skip once failed, contain any exception."""
        if self.h.failed:
            return default
        try:
            return fn(*args)
        except Exception as e:  # noqa: BLE001
            self.h.fail(fn.__name__, e)
            return default

    def call(self, hashes: list[bytes], xargs: dict | None = None, transfer: dict | None = None) -> int:
        """One request through schedule, worker copies, forward and finish. Returns the blocks
        it found cached (on the GPU or, loaded, from the host). `transfer`: its kv_transfer_params."""
        from vllm.v1.core.kv_cache_utils import make_block_hash_with_group_id
        pool = self.pool
        self.n += 1
        req = SimpleNamespace(request_id=f"r{self.n}", session_id=None, block_hashes=hashes,
                              num_prompt_tokens=len(hashes) * BS + 1, num_tokens=len(hashes) * BS + 1,
                              max_tokens=1, status="done", kv_transfer_params=transfer,
                              sampling_params=SimpleNamespace(extra_args=xargs or {}))
        self._g(self.h.arrived, req)
        hit = []
        for hh in hashes:
            b = pool.get_cached_block(hh, [0])
            if b is None:
                break
            hit.append(b[0])
        ext = self._g(self.h.lookup, req, len(hit) * BS, default=0) or 0
        pool.touch(hit)
        blocks = hit + pool.get_new_blocks(len(hashes) - len(hit))
        ids = [b.block_id for b in blocks]
        self._g(self.h.allocated, req, SimpleNamespace(get_block_ids=lambda: (ids,)), ext)
        n_ext = ext // BS
        pool.cache_full_blocks(req, blocks, len(hit), len(hashes), BS, 0)
        assert all(b.block_hash == make_block_hash_with_group_id(hh, 0) for b, hh in zip(blocks, hashes))
        self._g(self.h.step, None)
        plan = self.h.end_step()
        if self.buffers is not None:
            self.buffers.save(plan.saves)                     # handle_preemptions
            for b in blocks[len(hit):]:                        # vLLM zeroes new blocks
                self.kv[b.block_id].zero_()
            self.buffers.load(plan.loads)                      # start_load_kv
            for b, hh in zip(blocks[len(hit):len(hit) + n_ext], hashes[len(hit):]):
                assert bool((self.kv[b.block_id] == self.content(hh)).all()), "host load gave wrong KV"
                self.loaded_ok += 1
            for b, hh in zip(blocks[len(hit) + n_ext:], hashes[len(hit) + n_ext:]):
                self.kv[b.block_id] = self.content(hh)         # the forward computes the rest
        self._g(self.h.finished, req, ids)
        pool.free_blocks(reversed(blocks))
        return len(hit) + n_ext


def _prompt(seed: int, n: int) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(32) for _ in range(n)]


def _scenario(policy: str, **extra) -> tuple[int, PoolHarness]:
    """A live workflow's 16-block prompt, 5 ended workflows of 12 blocks each, then the live
    workflow again in a 63-block pool: how many of its blocks are still cached."""
    ph = PoolHarness(policy, 64, **extra)
    live = _prompt(1, 16)
    ph.call(live, {"agentrt_workflow": "live", "agentrt_agent": "planner"})
    for i in range(5):
        ph.call(_prompt(100 + i, 12), {"agentrt_workflow": f"f{i}", "agentrt_agent": "filler",
                                       "agentrt_end": 1})
    return ph.call(live, {"agentrt_workflow": "live", "agentrt_agent": "planner"}), ph


@requires_vllm
@pytest.mark.slow
def test_pool_stock_lru_loses_live_prefix_pbkv_keeps_it():
    lost, ph = _scenario("lru")
    assert lost < 16 and ph.h.orderer.stats.relinks == 0
    kept, ph = _scenario("pbkv-lae")
    assert kept == 16
    st = ph.h.stats()
    assert st["evicted"] > 0 and st["relinks"] > 0 and not st["failed"]
    assert len(ph.h.mirror) <= 63
    # the runtime's own time is counted apart from reordering, both positive and bounded by the run
    assert 0 < st["runtime_max_s"] <= st["runtime_s"] and st["reorder_s"] > 0
    assert "policy_forecasts_overruled" not in st        # pbkv-lae reports nothing of its own


@requires_vllm
@pytest.mark.slow
def test_pool_order_is_policy_order_and_stable():
    ph = PoolHarness("pbkv-lae", 64)
    a = _prompt(1, 4)
    ph.call(a, {"agentrt_workflow": "A"})                      # live
    ph.call(_prompt(2, 4), {"agentrt_workflow": "B", "agentrt_end": 1})   # ended: retired
    ph.call(_prompt(3, 4), {"agentrt_workflow": "C"})          # live, more recent
    ph.h.step(None)                                            # the next scheduler step
    free = [b for b in ph.pool.free_block_queue.get_all_free_blocks() if b.block_hash is not None]
    wf = [ph.h.mirror.by_block[b.block_id].meta.workflow.id for b in free]
    assert wf == ["B"] * 4 + ["A"] * 4 + ["C"] * 4
    # within a workflow: vLLM's order (a request's deepest block goes first)
    depth = [ph.h.mirror.by_block[b.block_id].depth for b in free[4:8]]
    assert depth == [4, 3, 2, 1]
    # nothing changed: the next step examines nothing
    runs = ph.h.orderer.stats.runs
    ph.h.step(None)
    assert ph.h.orderer.stats.runs == runs


@requires_vllm
@pytest.mark.slow
def test_pool_runtime_failure_falls_back_to_stock_lru():
    ph = PoolHarness("pbkv-lae", 64, fail_after=6)
    hits = [ph.call(_prompt(i % 3, 8), {"agentrt_workflow": f"w{i}", "agentrt_end": 1}) for i in range(12)]
    assert ph.h.failed and not ph.h.reorder
    assert not ph.pool._reuse_watchers            # its eviction watchers are gone too
    assert hits[-3:] == [8, 8, 8]                 # stock prefix caching carries on
    assert ph.pool.get_num_free_blocks() == 63


@requires_vllm
@pytest.mark.slow
def test_pool_policy_stats_reach_the_connector_stats_and_a_raising_one_is_contained():
    ph = PoolHarness("pbkv-ta", 64)
    ph.call(_prompt(1, 4), {"agentrt_workflow": "w", "agentrt_agent": "a"})
    st = ph.h.stats()
    assert st["policy_forecasts_overruled"] == 0 and st["policy_forecasts_judged"] == 0

    def boom():
        raise ZeroDivisionError("boom")
    ph.h.policy.stats = boom
    st = ph.h.stats()                                 # no exception into the caller
    assert ph.h.failed and st["failed"] is True and "policy_forecasts_overruled" not in st
    assert not ph.h.reorder                           # vLLM carries on with its own LRU order


@requires_vllm
@pytest.mark.parametrize("bad", [{"x": "3"}, {"x": float("nan")}, {"x": {1, 2}}, {3: 1}])
def test_pool_policy_stats_that_are_not_numbers_fail_the_policy_not_the_log(bad):
    ph = PoolHarness("pbkv-ta", 64)
    ph.call(_prompt(1, 4), {"agentrt_workflow": "w", "agentrt_agent": "a"})
    ph.h.policy.stats = lambda: dict(bad)
    st = ph.h.stats()
    assert ph.h.failed and not any(k.startswith("policy_") for k in st)
    json.dumps(st, allow_nan=False)                   # what the event log writes stays JSON


@requires_vllm
@pytest.mark.slow
def test_pool_plugin_policy_that_raises_in_score_is_contained():
    from agentrt.policies.pbkv import PBKVLAEPolicy
    from agentrt.policies.registry import register, unregister

    class Boom(PBKVLAEPolicy):
        name = "boom"

        def score(self, block):
            raise ZeroDivisionError("boom")

    mod = types.ModuleType("agentrt_test_boom")
    mod.register = lambda: register("boom", Boom, "raises in score")
    mod.register()
    sys.modules["agentrt_test_boom"] = mod
    try:
        ph = PoolHarness("boom", 64, plugins=["agentrt_test_boom"])
        ph.call(_prompt(1, 4), {"agentrt_workflow": "w"})
        before = [b.block_id for b in ph.pool.free_block_queue.get_all_free_blocks()]
        ph.call(_prompt(2, 4), {"agentrt_workflow": "v"})
        assert ph.h.failed and ph.h.orderer.stats.relinks == 0
        # scoring comes before any change to the queue: vLLM's own order is intact
        after = [b.block_id for b in ph.pool.free_block_queue.get_all_free_blocks()]
        assert len(after) == len(before) == 63
    finally:
        # later tests in this process list every registered policy (test_determinism runs them)
        unregister("boom")
        sys.modules.pop("agentrt_test_boom", None)


@requires_vllm
@pytest.mark.slow
def test_pool_host_tier_demotes_evicted_blocks_and_loads_them_back():
    lost, ph = _scenario("lru", host_blocks=64)
    st = ph.h.stats()
    # all 16 blocks found: the first ones still on the GPU (LRU evicts a prompt's tail first), the
    # rest loaded back from the host, holding the KV they were saved with
    assert lost == 16 and ph.loaded_ok > 0
    assert st["demoted"] > 0 and st["host_hit_blocks"] == st["host_loaded"] == ph.loaded_ok
    # a full host keeps what the policy values most: with pbkv-lae the live prefix
    kept, ph = _scenario("pbkv-lae", host_blocks=8)
    assert kept == 16 and ph.h.stats()["host_hit_blocks"] == 0


def _live_prefix_on_host():
    """A 40-block pool with a host tier: a live workflow's 16-block prompt, then three ended
    ones that push its prefix to the host. (harness, the live prompt, its last block's node)"""
    ph = PoolHarness("lru", 40, host_blocks=64)
    live = _prompt(1, 16)
    ph.call(live, {"agentrt_workflow": "live"})
    for i in range(3):
        ph.call(_prompt(100 + i, 12), {"agentrt_workflow": f"f{i}", "agentrt_end": 1})
    return ph, live, ph.h.mirror.nodes[bytes(live[-1]) + b"\0\0\0\0"]


@requires_vllm
@pytest.mark.slow
def test_pool_prefetch_loads_a_host_path_into_free_blocks():
    from agentrt.runtime.actions import Prefetch
    from agentrt.vllm import act
    ph, live, node = _live_prefix_on_host()
    assert act.EngineView.host_blocks_on_path(node) > 0
    # the bound in the hosted policy's key space (policies' acts are translated by its wrappers)
    n = act.prefetch(ph.h, Prefetch("default", node, 16, evict_below=ph.h.policy.bound(10**9)))
    plan = ph.h.end_step()
    ph.buffers.save(plan.saves)
    ph.buffers.load(plan.loads)
    assert n > 0 and len(plan.loads) == n
    for slot, bid in plan.loads:                           # the loaded blocks hold the right KV
        key = ph.pool.blocks[bid].block_hash
        assert bool((ph.kv[bid] == ph.content(key[:-4])).all())
    # the blocks the prefetch took from cached entries left the mirror; the loaded ones stay
    # mapped after the step's flush (it used to release the new mapping instead of the old)
    ph.h.step(None)
    m = ph.h.mirror
    for _, bid in plan.loads:
        node = m.by_block[bid]
        assert node.key == ph.pool.blocks[bid].block_hash and node.tier == GPU
    assert sum(m.tenant_blocks.values()) == len(m.by_block) == sum(n.copies for n in m.nodes.values() if n.tier == GPU)
    assert ph.call(live, {"agentrt_workflow": "live"}) == 16


@requires_vllm
@pytest.mark.slow
def test_a_failure_during_a_prefetch_gives_every_block_back_to_the_pool():
    """The policy raising while a prefetch holds new blocks (found by a review: the blocks stayed
    referenced, the pool shrank for good and vLLM's cache reset failed from then on)."""
    from agentrt.runtime.actions import Prefetch
    from agentrt.vllm import act
    ph, live, node = _live_prefix_on_host()
    free = ph.pool.get_num_free_blocks()

    def boom(e):
        raise RuntimeError("policy failed")

    ph.h.runtime.policy.observe = boom
    ph._g(act.prefetch, ph.h, Prefetch("default", node, 16, evict_below=ph.h.policy.bound(10**9)))
    assert ph.h.failed
    assert ph.pool.get_num_free_blocks() == free
    assert all(b.ref_cnt == 0 for b in ph.pool.blocks[1:])
    assert ph.pool.reset_prefix_cache()


@requires_vllm
@pytest.mark.slow
def test_a_prefix_cache_reset_clears_the_host_tier_instead_of_demoting_the_old_kv():
    """vLLM's reset_prefix_cache (after a weight update) does not call the connector by default,
    but fires every watcher: the KV it dropped must not be copied to the host and served later
    (found by a review: the next flush demoted the whole pre-reset cache)."""
    ph, live, _ = _live_prefix_on_host()
    assert len(ph.h.host) > 0
    assert ph.pool.reset_prefix_cache()
    ph.h.step(None)
    assert len(ph.h.mirror.by_block) == 0 and len(ph.h.host) == 0
    assert ph.h.stats()["host_hit_blocks"] == 0
    # nothing of the old cache comes back: not from the GPU, not from the host
    assert ph.call(live, {"agentrt_workflow": "live2"}) == 0


@requires_vllm
@pytest.mark.slow
def test_epoch_re_ranks_are_spaced_to_the_duty_cycle():
    """An epoch that comes sooner after the last full re-rank than (1 - duty) / duty times its
    cost waits (the queue keeps the previous keys); the first order call after the gap re-ranks."""
    from agentrt.vllm import reorder
    ph = PoolHarness("pbkv-lae", 64)
    ph.call(_prompt(1, 16), {"agentrt_workflow": "live", "agentrt_agent": "planner"})
    o = ph.h.orderer
    now = [0.0]
    o.clock = lambda: now[0]
    policy = ph.h.runtime.policy
    while hasattr(policy, "inner"):          # the policy under its wrappers (retention floor, ...)
        policy = policy.inner
    policy.epoch += 1
    ph.h.before_alloc()                      # a full re-rank (it took 0 s on this clock)
    scored = o.stats.scored
    o._next_full = 1.0                       # as if it had cost 1/49 s
    policy.epoch += 1
    ph.h.before_alloc()
    assert o.pending and o.stats.deferred == 1 and o.stats.scored == scored
    ph.h.before_alloc()                      # still too soon: still pending, still deferred
    assert o.pending and o.stats.deferred == 2
    now[0] = 2.0
    ph.h.before_alloc()                      # the gap passed: the pending epoch re-ranks
    assert not o.pending and o.stats.scored > scored and o._epoch == ph.h.runtime.epoch
    assert o.duty == reorder.DUTY == 0.02 and ph.h.stats()["reorders_deferred"] == 2
    t0 = now[0]
    now[0] = t0 + 0.0                        # a re-rank costing 1 s on this clock ...
    o.clock = iter([t0, t0 + 1.0]).__next__
    policy.epoch += 1
    ph.h.before_alloc()
    assert o._next_full == pytest.approx(t0 + 1.0 + 49.0)   # ... waits 49 s before the next one


# ---------------------------------------------------------------------------- live server
def _tokens(seed: int, n: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(16, 4000) for _ in range(n)]


def _complete(srv, prompt: list[int], xargs: dict | None = None, session_id: str | None = None,
              max_tokens: int = 1) -> dict:
    import httpx
    body = {"model": srv.served_name, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
    if xargs:
        body["vllm_xargs"] = xargs
    if session_id:
        body["session_id"] = session_id
    r = httpx.post(srv.base_url + "/v1/completions", json=body, timeout=120)
    r.raise_for_status()
    return r.json()


def _cached(resp: dict) -> int:
    return (resp["usage"].get("prompt_tokens_details") or {}).get("cached_tokens") or 0


def _live_scenario(srv) -> int:
    """Two finished planner->coder->planner workflows (CacheSage learns the transitions), then a
    live workflow's planner call (1024 tokens), six ended filler workflows (512 tokens each,
    more than the 95-block pool holds besides it), then the live planner again: its cached tokens."""
    anchor = _tokens(7, 256)
    for w in range(2):
        x = {"agentrt_workflow": f"train{w}"}
        _complete(srv, anchor + _tokens(20 + w, 64), {**x, "agentrt_agent": "planner"})
        _complete(srv, _tokens(30 + w, 128), {**x, "agentrt_agent": "coder"})
        _complete(srv, anchor + _tokens(20 + w, 64) + _tokens(40 + w, 32),
                  {**x, "agentrt_agent": "planner", "agentrt_end": 1})
    live = anchor + _tokens(8, 768)
    lx = {"agentrt_workflow": "wf-live", "agentrt_agent": "planner"}
    _complete(srv, live, lx)
    for i in range(6):
        _complete(srv, _tokens(100 + i, 512), {"agentrt_workflow": f"filler{i}", "agentrt_end": 1})
    return _cached(_complete(srv, live + _tokens(9, 32), lx))


@requires_vllm
@pytest.mark.slow
@pytest.mark.parametrize("policy", ["lru", "cachesage", "pbkv-lae"])
def test_live_workflow_keeps_its_prefix(vllm_servers, vllm_log_dir, policy):
    srv, log = connector_server(vllm_servers, vllm_log_dir, policy)
    check_live_prefix(srv, log, policy)


def check_live_prefix(srv, log, policy: str) -> None:
    """`_live_scenario` on a server running agentrt with `policy` (its event log `log`): LRU
    loses most of the live workflow's prefix, an agent-aware policy keeps it."""
    from agentrt.vllm.eventlog import read_events
    cached = _live_scenario(srv)
    stats = read_events(str(log), "stats")[-1]
    assert not stats["failed"] and stats["evicted"] > 0
    if policy == "lru":
        assert cached <= 512, "stock vLLM was expected to lose most of the live prefix"
    else:
        assert cached >= 992, f"{policy} lost the live workflow's prefix ({cached} cached)"
        assert stats["relinks"] > 0


@requires_vllm
@pytest.mark.slow
def test_identity_reaches_the_runtime(vllm_servers, vllm_log_dir):
    from agentrt.vllm.eventlog import read_events
    srv, log = connector_server(vllm_servers, vllm_log_dir, "pbkv-lae")
    _complete(srv, _tokens(500, 100), xargs_for("wf-id", "verifier", "acme", 4, end=True))
    _complete(srv, _tokens(501, 100), session_id="sess-42")
    _complete(srv, _tokens(502, 300))
    arr = read_events(str(log), "arrival")
    by_wf = {a["workflow"]: a for a in arr}
    a = by_wf["wf-id"]
    assert (a["agent"], a["tenant"], a["call"], a["end"], a["agent_explicit"]) == ("verifier", "acme", 4, True, True)
    s = by_wf["sess-42"]
    assert s["session_id"] == "sess-42" and s["explicit"] and not s["end"]
    anon = arr[-1]
    assert anon["workflow"].startswith("req:") and anon["agent"].startswith("anchor:")
    fin = {f["workflow"]: f for f in read_events(str(log), "finish")}
    assert fin["wf-id"]["end"] and fin["wf-id"]["agent"] == "verifier"


@requires_vllm
@pytest.mark.slow
def test_runtime_failing_mid_run_leaves_every_request_answered(vllm_servers, vllm_log_dir):
    import concurrent.futures as cf
    from agentrt.vllm.eventlog import read_events
    srv, log = connector_server(vllm_servers, vllm_log_dir, "pbkv-lae", fail_after=25)
    prompts = [(_tokens(300 + i % 5, 400), {"agentrt_workflow": f"w{i % 5}", "agentrt_agent": "a"})
               for i in range(24)]
    with cf.ThreadPoolExecutor(4) as ex:
        out = list(ex.map(lambda p: _complete(srv, p[0], p[1], max_tokens=4), prompts))
    assert len(out) == 24 and all(o["choices"][0]["finish_reason"] for o in out)
    errors = read_events(str(log), "error")
    assert len(errors) == 1 and errors[0]["disabled"] and "injected" in errors[0]["error"]
    # stock LRU carries on: a repeated prompt still hits the prefix cache
    assert _cached(_complete(srv, prompts[0][0])) >= 384
    # the runtime is off for good: it wrote nothing after its error
    assert all(st["t"] <= errors[0]["t"] for st in read_events(str(log), "stats"))
    # and vLLM's /metrics says so (the fallback state travels with the step's scheduler stats)
    from test_vllm_metrics import scrape, value
    smp = scrape(srv)
    assert value(smp, "agentrt_connector_runtime_failed", policy="pbkv-lae", engine="0") == 1
    assert value(smp, "agentrt_connector_requests_total") > 0


@requires_vllm
@pytest.mark.slow
def test_host_tier_serves_an_evicted_prefix_with_the_same_kv(vllm_servers, vllm_log_dir):
    import httpx
    from agentrt.enginebench import prom
    from agentrt.vllm.eventlog import read_events
    srv, log = connector_server(vllm_servers, vllm_log_dir, "lru", host_blocks=128)
    p = _tokens(900, 1024)
    first = _complete(srv, p, {"agentrt_workflow": "h"}, max_tokens=8)
    for i in range(6):                                   # more than the pool holds besides it
        _complete(srv, _tokens(910 + i, 512), {"agentrt_workflow": f"hf{i}", "agentrt_end": 1})
    before = prom.parse(httpx.get(srv.base_url + "/metrics").text)
    again = _complete(srv, p, {"agentrt_workflow": "h"}, max_tokens=8)
    after = prom.parse(httpx.get(srv.base_url + "/metrics").text)
    d = prom.delta(after, before)
    assert _cached(again) >= 992 and d[prom.EXT_HITS] > 0         # served from the host tier
    assert again["choices"][0]["text"] == first["choices"][0]["text"]   # with the KV it had
    st = read_events(str(log), "stats")[-1]
    assert st["host_hit_blocks"] > 0 and st["demoted"] > 0 and not st["failed"]


# ---------------------------------------------------------------------------- injected faults
class _Flaky:
    """Make methods of an object raise with probability `p` (seeded): faults at random points."""

    def __init__(self, rng: random.Random, p: float) -> None:
        self.rng, self.p, self.fired = rng, p, 0

    def wrap(self, obj, name: str) -> None:
        fn = getattr(obj, name)

        def flaky(*args, **kwargs):
            if self.rng.random() < self.p:
                self.fired += 1
                raise RuntimeError(f"injected fault in {type(obj).__name__}.{name}")
            return fn(*args, **kwargs)
        setattr(obj, name, flaky)


def _connector(policy: str, num_blocks: int, **extra):
    """The real `AgentRTConnector` (scheduler role) on vLLM's real BlockPool, built from a minimal
    stand-in for vLLM's config (the connector reads only these fields)."""
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
    from vllm.v1.core.block_pool import BlockPool
    from agentrt.vllm.connector import AgentRTConnector
    kv = SimpleNamespace(kv_connector_extra_config={"policy": policy, **extra})
    vcfg = SimpleNamespace(kv_transfer_config=kv, cache_config=SimpleNamespace(block_size=BS),
                           parallel_config=SimpleNamespace(distributed_executor_backend=None))
    conn = AgentRTConnector(vcfg, KVConnectorRole.SCHEDULER, None)
    pool = BlockPool(num_gpu_blocks=num_blocks, enable_caching=True, hash_block_size=BS)
    conn.bind_gpu_block_pool(pool)
    return conn, pool


def _batch(pool, conn, reqs: list) -> list[int]:
    """One scheduler round for a few concurrent requests, as vLLM's scheduler drives the
    connector (conn None: stock vLLM, the pool alone). Returns each request's cached blocks."""
    from agentrt.vllm.connector import AgentRTMetadata
    held = []
    for r in reqs:
        if conn is not None:
            assert conn.on_new_request(r) is None
    for r in reqs:
        hit = []
        for hh in r.block_hashes:
            b = pool.get_cached_block(hh, [0])
            if b is None:
                break
            hit.append(b[0])
        ext = 0
        if conn is not None:
            ext, asynchronous = conn.get_num_new_matched_tokens(r, len(hit) * BS)
            assert asynchronous is False and ext is not None and ext >= 0
        pool.touch(hit)
        blocks = hit + pool.get_new_blocks(len(r.block_hashes) - len(hit))
        ids = [b.block_id for b in blocks]
        if conn is not None:
            conn.update_state_after_alloc(r, SimpleNamespace(get_block_ids=lambda ids=ids: (ids,)), ext)
        pool.cache_full_blocks(r, blocks, len(hit), len(r.block_hashes), BS, 0)
        held.append((r, blocks, len(hit) + ext // BS))
    if conn is not None:
        meta = conn.build_connector_meta(None)
        assert isinstance(meta, AgentRTMetadata)
    for r, blocks, _ in held:
        if conn is not None:
            assert conn.request_finished(r, [b.block_id for b in blocks]) == (False, None)
        pool.free_blocks(reversed(blocks))
    return [n for _, _, n in held]


def _requests(seed: int, n: int) -> list:
    """`n` requests of a few agentic workflows sharing system prompts, some ending their workflow."""
    rng = random.Random(seed)
    anchors = [_prompt(1000 + a, 4) for a in range(3)]
    hist: dict[str, list[bytes]] = {}
    out = []
    for i in range(n):
        wf = f"w{rng.randrange(6)}"
        a = rng.randrange(3)
        h = hist.setdefault(wf, list(anchors[a]))
        h.extend(_prompt(seed * 10_000 + i, rng.randrange(1, 4)))
        hashes = list(h[:12])
        xargs = {"agentrt_workflow": wf, "agentrt_agent": f"agent{a}", "agentrt_tenant": f"t{a % 2}"}
        if rng.random() < 0.2:
            xargs["agentrt_end"] = 1
            hist.pop(wf)
        out.append(SimpleNamespace(request_id=f"r{i}", session_id=None, block_hashes=hashes,
                                   num_prompt_tokens=len(hashes) * BS + 1,
                                   num_tokens=len(hashes) * BS + 1, max_tokens=1, status="done",
                                   sampling_params=SimpleNamespace(extra_args=xargs)))
    return out


def _free_order(pool) -> list:
    return [(b.block_id, b.block_hash) for b in pool.free_block_queue.get_all_free_blocks()]


@requires_vllm
@pytest.mark.parametrize("policy,host_blocks", [("cachesage", 0), ("pbkv-lae", 0), ("ttl", 0),
                                                ("cachesage", 16), ("pbkv-lae", 16)])
@pytest.mark.parametrize("seed", range(6))
def test_faults_at_random_points_fall_back_to_stock_lru(policy, host_blocks, seed):
    """Exceptions injected at random points of the policy and runtime calls the connector makes:
    no hook raises into vLLM, the runtime switches off at the first one and lets go of what it
    held, and from then on the pool behaves exactly as stock vLLM's (a twin pool driven without
    the connector from the same state gives the same hits and the same free-queue order)."""
    import copy
    conn, pool = _connector(policy, 64, host_blocks=host_blocks, sweep_interval_s=0.0,
                            max_workflows_per_tenant=3)
    h = conn.hosted
    rng = random.Random(seed)
    flaky = _Flaky(rng, p=0.03)
    for name in ("observe", "score", "act"):
        flaky.wrap(h.policy, name)
    for name in ("observe", "sweep", "resolve_agent"):
        flaky.wrap(h.runtime, name)
    reqs = _requests(seed, 90)
    twin = None
    relinks_at_failure = None
    i = 0
    while i < len(reqs):
        batch = reqs[i:i + rng.randrange(1, 4)]
        i += len(batch)
        hits = _batch(pool, conn, batch)
        if twin is not None:
            assert hits == _batch(twin, None, batch), "the pool left stock LRU behaviour"
            assert _free_order(pool) == _free_order(twin)
            assert h.orderer.stats.relinks == relinks_at_failure     # agentrt reorders nothing
        elif h.failed:
            twin = copy.deepcopy(pool)                                # stock vLLM from here on
            relinks_at_failure = h.orderer.stats.relinks
    assert flaky.fired > 0 and h.failed and not h.reorder, "no fault was injected: raise p"
    # nothing leaked: no watcher left in vLLM's pool, no request held, every block free again
    assert not pool._reuse_watchers
    assert not h._reqs and not h._waiting and not h._plans and not h.evictions.reused
    assert pool.get_num_free_blocks() == 63
    # the hooks answer as a connector with nothing to load
    r = _requests(seed + 100, 1)[0]
    assert conn.get_num_new_matched_tokens(r, 0) == (0, False)
    meta = conn.build_connector_meta(None)
    assert meta.saves == [] and meta.loads == []
    # vLLM's prefix cache still serves a repeated prompt
    again = _requests(seed + 200, 1)[0]
    _batch(pool, conn, [again])
    assert _batch(pool, conn, [again]) == [len(again.block_hashes)]


@requires_vllm
def test_connector_sweeps_on_its_steps_and_counts_capped_workflows():
    conn, pool = _connector("cachesage", 64, silent_after_s=0.0, sweep_interval_s=0.0,
                            max_workflows_per_tenant=2)
    h = conn.hosted
    reqs = _requests(3, 12)
    for r in reqs:
        r.sampling_params.extra_args.pop("agentrt_end", None)
        r.sampling_params.extra_args["agentrt_tenant"] = "t"
    _batch(pool, conn, reqs[:1])
    assert len(h.runtime.workflows) == 1
    conn.build_connector_meta(None)           # the next scheduler step sweeps the silent workflow
    assert h.stats()["workflows_silenced"] == 1 and not h.runtime.workflows
    h.cfg.silent_after_s = h.runtime.silent_after_s = 3600.0
    for r in reqs[1:]:
        _batch(pool, conn, [r])
    st = h.stats()
    assert st["live_workflows"] <= 2 and st["workflows_capped"] > 0 and not st["failed"]


@requires_vllm
@pytest.mark.slow
def test_hosted_in_the_scheduler_full_re_ranks_wait_for_the_forward_window():
    """`off_path` (agentrt in vLLM's scheduler class): the scheduler's hooks never run a full
    re-rank, the forward window runs the pending one whatever the duty cycle says, and a window
    shorter than the last re-rank hands them back to the duty cycle."""
    ph = PoolHarness("pbkv-lae", 64)
    ph.call(_prompt(1, 16), {"agentrt_workflow": "live", "agentrt_agent": "planner"})
    h, o = ph.h, ph.h.orderer
    policy = h.runtime.policy
    while hasattr(policy, "inner"):
        policy = policy.inner
    policy.epoch += 1
    h.before_alloc()                          # a full re-rank: the queue has a sorted tail
    assert o._tail is not None
    h.off_path = True
    runs = o.stats.runs
    policy.epoch += 1
    h.before_alloc()                          # the duty cycle would allow it; off the path it waits
    assert o.pending and o.stats.deferred == 1 and o._epoch != h.runtime.epoch
    o._next_full = float("inf")               # the duty cycle would never allow it ...
    h.during_forward(None)                    # ... the forward window runs it
    assert not o.pending and o._epoch == h.runtime.epoch and o.stats.runs == runs + 2
    o.last_full_s = 0.5
    policy.epoch += 1
    h.before_alloc()
    h.during_forward(0.1)                     # a window shorter than the last re-rank: skipped
    assert o.pending and h._window_short
    o._next_full = 0.0
    h.before_alloc()                          # ... and the duty cycle takes over again
    assert not o.pending and o._epoch == h.runtime.epoch

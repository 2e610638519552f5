"""Tenant KV shares inside vLLM (`tenant_shares`): a burst evicts its own cache, not a quiet tenant's.

On vLLM's real `BlockPool` driven as its scheduler drives it (fast), and against a real vLLM
server with the tiny local model (slow): the same scenario with and without shares.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from agentrt.vllm.config import ConnectorConfig
from agentrt.vllm.mirror import Mirror
from agentrt.vllm.tenants import TenantLedger
from test_vllm_connector import PoolHarness, _cached, _complete, _prompt, _tokens
from vllm_support import connector_server, requires_vllm


# ---------------------------------------------------------------------------- config, ledger
def test_tenant_shares_config_values_and_errors():
    assert ConnectorConfig.from_extra({})[0].share_weights() is None
    cfg, _ = ConnectorConfig.from_extra({"tenant_shares": True})
    assert cfg.share_weights() == {} and not cfg.stock      # lru with shares reorders
    cfg, _ = ConnectorConfig.from_extra({"tenant_shares": "gold:3,free:1"})
    assert cfg.share_weights() == {"gold": 3.0, "free": 1.0}
    assert ConnectorConfig.from_extra({"tenant_shares": {"a": 2}})[0].share_weights() == {"a": 2.0}
    for bad in ("gold", "gold:0", "gold:x", {"a": -1}, 3, ["a"]):
        with pytest.raises(ValueError, match="tenant_shares"):
            ConnectorConfig.from_extra({"tenant_shares": bad})


def test_ledger_counts_running_blocks_beyond_the_hit_and_skips_waiting():
    led = TenantLedger({}, 16)
    led.shares = object()                                    # on (only its presence is read here)
    r1 = SimpleNamespace(request_id="r1", num_tokens=100)    # 7 blocks, 2 of them a hit
    r2 = SimpleNamespace(request_id="r2", num_tokens=33)     # 3 blocks
    r3 = SimpleNamespace(request_id="r3", num_tokens=500)    # waiting: holds nothing
    led.track(r1, "a")
    led.track(r2, "b")
    led.track(r3, "a")
    led.recount({"r3"}, lambda rid: 2 if rid == "r1" else 0)
    assert led.tenant_reserved == {"a": 5, "b": 3}
    r1.num_tokens = 130                                      # decoding grows it
    led.untrack("r2")
    led.recount(set(), lambda rid: 2 if rid == "r1" else 0)
    assert led.tenant_reserved == {"a": 7 + 32} and len(led) == 2
    # vLLM preempted r1 (its blocks freed, back in the waiting queue): it holds nothing until it runs
    r1.status = SimpleNamespace(name="PREEMPTED")
    led.recount(set(), lambda rid: 2 if rid == "r1" else 0)
    assert led.tenant_reserved == {"a": 32}
    r1.status = SimpleNamespace(name="RUNNING")
    led.recount(set(), lambda rid: 2 if rid == "r1" else 0)
    assert led.tenant_reserved == {"a": 7 + 32}
    off = TenantLedger({}, 16)                               # shares off: nothing is tracked
    off.track(r1, "a")
    off.refresh(set(), lambda rid: 0)
    assert len(off) == 0 and off.tenant_reserved == {}


def test_mirror_tenant_counts_follow_mapping_and_eviction():
    def blk(bid, h):
        return SimpleNamespace(block_id=bid, block_hash=h, is_null=False)
    m = Mirror()
    m.add_path([blk(1, b"a1"), blk(2, b"a2")], "A")
    m.add_path([blk(3, b"b1")], "B")
    m.add_path([blk(4, b"a1")], "B")          # a second copy of A's hash counts for A
    assert m.tenant_blocks == {"A": 3, "B": 1}
    m.evict_block(1)
    m.evict_block(3)
    assert m.tenant_blocks == {"A": 2}
    m.clear()
    assert m.tenant_blocks == {}


# ---------------------------------------------------------------------------- real BlockPool
def _burst_scenario(sybils: int = 0, **extra) -> tuple[int, PoolHarness]:
    """Tenant A's live 16-block prompt, then `sybils` tenants of one live 1-block prompt each,
    then tenant B's burst of five live workflows (12 blocks each) in a 63-block pool, then A's
    prompt again: how many of its blocks are still cached."""
    ph = PoolHarness("lru", 64, **extra)
    a = _prompt(1, 16)
    ax = {"agentrt_workflow": "a-live", "agentrt_agent": "planner", "agentrt_tenant": "A"}
    ph.call(a, ax)
    for k in range(sybils):
        ph.call(_prompt(50 + k, 1), {"agentrt_workflow": f"s{k}", "agentrt_agent": "w",
                                     "agentrt_tenant": f"sybil{k}"})
    for i in range(5):
        ph.call(_prompt(100 + i, 12), {"agentrt_workflow": f"b{i}", "agentrt_agent": "w",
                                       "agentrt_tenant": "B"})
    return ph.call(a, ax), ph


@requires_vllm
@pytest.mark.slow
def test_pool_burst_evicts_the_quiet_tenant_without_shares_and_its_own_cache_with_them():
    lost, ph = _burst_scenario()
    assert lost < 16 and ph.h.orderer.stats.relinks == 0
    kept, ph = _burst_scenario(tenant_shares=True)
    st = ph.h.stats()
    assert kept == 16, f"tenant A lost its prefix under shares ({kept} of 16 blocks cached)"
    assert st["evicted"] > 0 and st["relinks"] > 0 and not st["failed"]
    # B's blocks went instead, and B is over its half of the pool
    m = ph.h.mirror
    assert m.tenant_blocks["A"] == 16 and st["policy_tenants_over_share"] == 1
    assert sum(m.tenant_blocks.values()) == len(m.by_block)
    # weights: B weighs 4x A, so 4/5 of the pool is B's and A is over its fifth (12.6 blocks)
    _, ph = _burst_scenario(tenant_shares="A:1,B:4")
    assert ph.h.policy.over == {"A"}
    # a failure lets go of the requests the ledger tracked
    ph.h.tenants.track(SimpleNamespace(request_id="x", num_tokens=10), "A")
    ph.h.fail("test", RuntimeError("boom"))
    assert len(ph.h.tenants) == 0 and not ph.h.reorder


@requires_vllm
@pytest.mark.slow
def test_pool_tenants_that_hold_one_block_do_not_dilute_the_quiet_tenants_share():
    # ten invented tenants of one block each cut every guarantee to 63 / 12 = 5.25 blocks, so A
    # (16) and B are both over theirs; the max-min level ((63 - 10) / 2 each) still protects A
    kept, ph = _burst_scenario(sybils=10, tenant_shares=True)
    st = ph.h.stats()
    assert kept == 16, f"tenant A lost its prefix to the diluted shares ({kept} of 16 blocks cached)"
    assert st["relinks"] > 0 and not st["failed"]
    assert not any(t.startswith("sybil") for t in ph.h.policy.over)
    assert ph.h.mirror.tenant_blocks["A"] == 16


# ---------------------------------------------------------------------------- live server
def _live_burst(srv, tag: str, seed: int) -> int:
    """Tenant A's live 1024-token call, tenant B's six live workflows of 512 tokens (more than the
    95-block pool holds beside A's), then A's call again: its cached tokens."""
    a = _tokens(seed, 1024)
    ax = {"agentrt_workflow": f"{tag}-a", "agentrt_agent": "planner", "agentrt_tenant": "quiet"}
    _complete(srv, a, ax)
    for i in range(6):
        _complete(srv, _tokens(seed + 1 + i, 512),
                  {"agentrt_workflow": f"{tag}-b{i}", "agentrt_agent": "w", "agentrt_tenant": "burst"})
    return _cached(_complete(srv, a + _tokens(9, 32), ax))


@requires_vllm
@pytest.mark.slow
def test_pool_a_shared_prefix_mirrored_while_its_computer_runs_counts_once():
    """R1 computes an 8-block system prompt and runs on; R2 hits it and finishes first, so the
    mirror maps those blocks while R1 still holds them: they count as cached, not also as R1's."""
    from test_vllm_preemption import _run
    ph = PoolHarness("lru", 64, tenant_shares=True)
    shared = _prompt(1, 8)
    _run(ph, "r1", shared + _prompt(2, 4), {"agentrt_workflow": "w1", "agentrt_agent": "coder"})
    r2, blocks = _run(ph, "r2", shared + _prompt(3, 2), {"agentrt_workflow": "w2", "agentrt_agent": "coder"},
                      hit=8)
    assert ph.h.tenants.tenant_reserved == {"default": 13 + 3}      # r1: 13 blocks; r2: 11 less 8
    ph.h.finished(r2, [b.block_id for b in blocks])
    ph.pool.free_blocks(reversed(blocks))
    ph.h.step(None)
    assert ph.h.mirror.tenant_blocks == {"default": 10}
    # r1 holds 13 (12 full blocks and its next token's), 8 of them now mirrored: 5 more, not 13
    assert ph.h.tenants.tenant_reserved == {"default": 5}


@requires_vllm
@pytest.mark.slow
def test_live_vllm_tenant_shares_keep_the_quiet_tenants_prefix(vllm_servers, vllm_log_dir):
    from agentrt.vllm.eventlog import read_events
    stock, _ = connector_server(vllm_servers, vllm_log_dir, "lru")
    assert _live_burst(stock, "stock", 7000) <= 512, "stock vLLM was expected to lose the quiet tenant's prefix"
    srv, log = connector_server(vllm_servers, vllm_log_dir, "lru", tenant_shares=True)
    cached = _live_burst(srv, "shares", 7100)
    assert cached >= 992, f"the quiet tenant lost its prefix under tenant shares ({cached} cached)"
    st = read_events(str(log), "stats")[-1]
    assert not st["failed"] and st["evicted"] > 0 and st["relinks"] > 0

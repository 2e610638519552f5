"""PBKV in small exact scenarios, with a fixed stub predictor."""

import pytest

from agentrt.cache import HOST, RadixKVCache
from agentrt.policies.pbkv import PBKVAggressivePolicy, PBKVHEPolicy, PBKVLAEPolicy, PBKVPolicy
from agentrt.runtime import events as ev
from agentrt.runtime.actions import Prefetch
from agentrt.runtime.runtime import AgentRuntime

from conftest import FixedPredictor as Fixed

BS = 16


def setup(policy, gpu=100, host=0):
    rt = AgentRuntime(policy)
    cache = RadixKVCache(gpu, host_capacity=host, policy=policy, block_bytes=1)
    rt.touch_clock = lambda: cache.touch_clock
    return rt, cache


def call(rt, cache, rid, wf, agent, ids, t):
    info = ev.CallInfo(rid=rid, workflow=wf, agent=agent, tenant="default", index=rid, hash_ids=ids,
                       input_length=len(ids) * BS, output_length=1, block_size=BS)
    rt.observe(ev.CallArrived(t, info))
    lease = cache.acquire("default", ids, len(ids), 0, t)
    cache.commit_prompt(lease, t)
    cache.release(lease, [], t)
    rt.observe(ev.CallFinished(t, info, lease.node))
    return lease


def test_lae_retired_first_then_lru():
    p = PBKVLAEPolicy()
    rt, cache = setup(p)
    call(rt, cache, 1, "live", "a", [1], 0.0)
    call(rt, cache, 2, "done", "a", [2], 1.0)
    call(rt, cache, 3, "live2", "b", [3], 2.0)
    rt.observe(ev.WorkflowEnded(3.0, "done", "default"))
    assert [b.hash for b in cache.peek_victims(3)] == [2, 1, 3]


def test_he_ranks_active_blocks_by_lookahead_score():
    # agent "a" likely next (0.7), "b" unlikely (0.1): b's blocks go before a's, retired first
    p = PBKVHEPolicy(predictor=Fixed(["a", "b"], [0.7, 0.1]), gamma=0.5)
    rt, cache = setup(p)
    call(rt, cache, 1, "w", "a", [1], 0.0)
    call(rt, cache, 2, "w", "b", [2], 1.0)
    call(rt, cache, 3, "old", "a", [3], 2.0)
    rt.observe(ev.WorkflowEnded(3.0, "old", "default"))
    assert [b.hash for b in cache.peek_victims(3)] == [3, 2, 1]
    th_a = rt.workflows[("default", "w")].threads["a"]
    assert th_a.value == pytest.approx(0.7 + 0.5 * 0.7)      # sum_k gamma^(k-1) P^(k)


def test_he_without_a_predictor_is_lae():
    he, lae = PBKVHEPolicy(), PBKVLAEPolicy()
    orders = []
    for p in (he, lae):
        rt, cache = setup(p)
        for i, (wf, a) in enumerate([("w", "a"), ("w", "b"), ("x", "a"), ("y", "c")]):
            call(rt, cache, i, wf, a, [10 + i], float(i))
        rt.observe(ev.WorkflowEnded(5.0, "x", "default"))
        orders.append([b.hash for b in cache.peek_victims(4)])
    assert orders[0] == orders[1]


def test_full_noise_changes_scores_deterministically():
    def values(noise, seed):
        p = PBKVHEPolicy(predictor=Fixed(["a", "b"], [0.7, 0.1]), predictor_noise=noise, seed=seed)
        rt, cache = setup(p)
        call(rt, cache, 1, "w", "a", [1], 0.0)
        p.score(cache.peek_victims(1)[0])
        return rt.workflows[("default", "w")].threads["a"].value
    assert values(0.0, 0) == pytest.approx(0.7 + 0.8 * 0.7)
    assert values(1.0, 0) == values(1.0, 0) != values(0.0, 0)


class View:
    block_size = BS

    def __init__(self, pcie_idle=True, decode_only=True, budget=100, host_blocks=50):
        self.pcie_idle = pcie_idle
        self.decode_only = decode_only
        self.pcie_blocks_per_iteration = budget
        self.host_blocks = host_blocks
        self.idle = True

    @staticmethod
    def on_host(node):
        return node.tier == HOST

    @staticmethod
    def host_blocks_on_path(node):
        n = 0
        while node is not None and node.tier == HOST:
            n += 1
            node = node.parent
        return n


def demoted_setup(policy_cls):
    p = policy_cls(predictor=Fixed(["a", "b"], [0.9, 0.05]))
    rt, cache = setup(p, gpu=4, host=20)
    call(rt, cache, 1, "w", "a", [1, 2], 0.0)          # will be demoted
    call(rt, cache, 2, "w", "b", [5, 6, 7, 8], 1.0)    # pushes a's blocks to the host
    assert cache.roots["default"].children[1].tier == HOST
    return p, rt, cache


def test_conservative_prefetch_only_when_decode_only_and_pcie_idle():
    p, rt, cache = demoted_setup(PBKVPolicy)
    assert p.act(2.0, View(decode_only=False)) == []
    assert p.act(2.0, View(pcie_idle=False)) == []
    acts = p.act(2.0, View())
    assert len(acts) == 1 and isinstance(acts[0], Prefetch)
    a = acts[0]
    assert a.max_blocks == 2 and a.evict_below == (1,)
    # the GPU holds only b's active blocks: nothing free, nothing retired, so nothing loads
    assert cache.prefetch(a.node, 2.0, a.max_blocks, a.evict_below) == []
    rt.observe(ev.WorkflowEnded(3.0, "w", "default"))   # now b's blocks are retired...
    p2, rt2, cache2 = demoted_setup(PBKVPolicy)
    call(rt2, cache2, 3, "z", "a", [40], 2.0)           # ...and a retired workflow's block
    rt2.observe(ev.WorkflowEnded(2.5, "z", "default"))
    a2 = p2.act(3.0, View())[0]
    loaded = cache2.prefetch(a2.node, 3.0, a2.max_blocks, a2.evict_below)
    assert [b.hash for b in loaded] == [1]              # one retired block to give, one loaded
    cache2.check_invariants()


def test_aggressive_prefetch_may_evict_active_cache():
    p, rt, cache = demoted_setup(PBKVAggressivePolicy)
    acts = p.act(2.0, View(decode_only=False, pcie_idle=False, budget=0))
    assert len(acts) == 1
    a = acts[0]
    loaded = cache.prefetch(a.node, 2.0, a.max_blocks, a.evict_below)
    assert [b.hash for b in loaded] == [1, 2]           # b's (less likely) blocks made room
    cache.check_invariants()

"""Exact eviction orders and tier moves in small scenarios (vLLM test_prefix_caching style)."""

import random

import pytest

from agentrt.cache import GONE, GPU, HOST, RadixKVCache
from agentrt.runtime.policy import Policy


def run(cache, tenant, ids, extra=0, now=0.0, out=()):
    """Admit, compute and finish one request."""
    lease = cache.acquire(tenant, ids, len(ids), extra, now)
    assert lease is not None
    cache.commit_prompt(lease, now)
    cache.release(lease, list(out), now)
    cache.check_invariants()
    return lease


def cached(cache, tenant="t"):
    out = []
    stack = [cache.roots[tenant]] if tenant in cache.roots else []
    while stack:
        n = stack.pop()
        for c in n.children.values():
            if c.tier == GPU:
                out.append(c.hash)
            stack.append(c)
    return sorted(out)


def test_lru_evicts_least_recent_leaf_first():
    c = RadixKVCache(6)
    run(c, "t", [1, 2])        # touched first
    run(c, "t", [3, 4])
    run(c, "t", [5, 6])
    run(c, "t", [1, 2])        # 1,2 now most recent
    run(c, "t", [7])           # needs 1 block: evicts 4 (leaf of the LRU path), not 3
    assert cached(c) == [1, 2, 3, 5, 6, 7]
    run(c, "t", [8])           # next: 3 has become a leaf and is now the least recent
    assert cached(c) == [1, 2, 5, 6, 7, 8]


def test_parent_becomes_leaf_only_after_children():
    c = RadixKVCache(4)
    run(c, "t", [1, 2, 3])
    run(c, "t", [1, 2, 4])     # shares 1,2; the tree is 1-2-{3,4}
    run(c, "t", [9, 8, 7])     # evicts 3 then 4 (leaves), then 2, never 1 before 2
    assert c.evictions == 3 and cached(c) == [1, 7, 8, 9]


def test_locked_blocks_are_never_evicted():
    c = RadixKVCache(4)
    held = c.acquire("t", [1, 2], 2, 0, 0.0)
    c.commit_prompt(held, 0.0)
    assert c.acquire("t", [5, 6, 7], 3, 0, 1.0) is None       # only 2 free, 0 evictable
    c.check_invariants()
    lease = c.acquire("t", [5, 6], 2, 0, 1.0)
    assert lease is not None
    c.commit_prompt(lease, 1.0)
    c.release(lease, [], 1.0)
    run(c, "t", [8, 9], now=2.0)                             # evicts 5,6, not the held 1,2
    assert cached(c) == [1, 2, 8, 9]
    c.release(held, [], 3.0)
    c.check_invariants()


def test_failed_acquire_changes_nothing():
    c = RadixKVCache(3)
    run(c, "t", [1, 2])
    held = c.acquire("t", [1, 2], 2, 1, 1.0)
    touch = c.touch_clock
    assert c.acquire("t", [1, 2, 3, 4], 4, 0, 2.0) is None
    assert c.touch_clock == touch and c.locked_gpu == 2 and c.reserved == 1
    c.check_invariants()
    c.release(held, [], 3.0)


def test_host_tier_demotes_and_loads_back():
    c = RadixKVCache(2, host_capacity=4, block_bytes=100)
    run(c, "t", [1, 2])
    run(c, "t", [3, 4])        # 1,2 demoted to the host
    assert c.demotions == 2 and c.host_used == 2 and c.d2h_bytes == 200
    lease = c.acquire("t", [1, 2], 2, 0, 5.0)
    assert (lease.gpu_hit, lease.host_hit) == (0, 2) and c.h2d_bytes == 200
    assert [b.tier for b in lease.node.path()] == [GPU, GPU]
    c.commit_prompt(lease, 5.0)
    c.release(lease, [], 5.0)
    c.check_invariants()
    assert cached(c) == [1, 2]


def test_host_tier_is_lru_and_drops_leaves():
    c = RadixKVCache(1, host_capacity=2)
    for h in (1, 2, 3, 4):
        run(c, "t", [h], now=float(h))
    # GPU holds 4; host held 1,2,3 in turn and dropped the oldest
    assert cached(c) == [4]
    assert sorted(b.hash for b in c.roots["t"].children.values() if b.tier == HOST) == [2, 3]
    assert c.host_evictions == 1


def test_tenants_never_share_blocks():
    c = RadixKVCache(8)
    run(c, "a", [1, 2])
    lease = c.acquire("b", [1, 2], 2, 0, 1.0)
    assert lease.gpu_hit == 0
    c.commit_prompt(lease, 1.0)
    c.release(lease, [], 1.0)
    assert cached(c, "a") == [1, 2] and cached(c, "b") == [1, 2] and c.gpu_used == 4


def test_output_blocks_are_cached_and_extend_the_chain():
    c = RadixKVCache(8)
    run(c, "t", [1, 2], extra=2, out=[3, 4])
    lease = c.acquire("t", [1, 2, 3, 4, 5], 5, 0, 1.0)
    assert lease.gpu_hit == 4


def test_concurrent_identical_prompts_share_blocks():
    c = RadixKVCache(8)
    a = c.acquire("t", [1, 2], 2, 0, 0.0)
    b = c.acquire("t", [1, 2], 2, 0, 0.0)      # neither is cached yet: both reserve
    assert c.reserved == 4
    c.commit_prompt(a, 0.0)
    c.commit_prompt(b, 0.0)                    # finds a's blocks, gives its reservation back
    assert c.gpu_used == 2 and c.reserved == 0
    c.check_invariants()
    c.release(a, [], 1.0)
    c.release(b, [], 1.0)
    c.check_invariants()


class Reverse(Policy):
    """Evicts the most recently touched first: shows the order comes from the policy."""
    name = "mru"

    def score(self, block):
        return -block.last_touch


def test_eviction_order_comes_from_the_policy():
    c = RadixKVCache(4, policy=Reverse())
    run(c, "t", [1])
    run(c, "t", [2])
    run(c, "t", [3])
    run(c, "t", [4])
    run(c, "t", [5])            # MRU: evicts 4
    assert cached(c) == [1, 2, 3, 5]


class Epoch(Policy):
    dynamic = True

    def __init__(self):
        super().__init__()
        self.keep = set()

    def score(self, block):
        return (block.hash in self.keep, block.last_touch)


def test_policy_epoch_reranks_without_touches():
    p = Epoch()
    c = RadixKVCache(3, policy=p)
    for h in (1, 2, 3):
        run(c, "t", [h])
    p.keep = {1}
    p.epoch += 1               # 1 is now precious though least recent
    run(c, "t", [4])
    assert cached(c) == [1, 3, 4]
    assert c.peek_victims(1)[0].hash == 3


def test_invalid_capacities():
    with pytest.raises(ValueError):
        RadixKVCache(0)
    with pytest.raises(ValueError):
        RadixKVCache(4, host_capacity=-1)


def test_removed_blocks_are_gone():
    c = RadixKVCache(1)
    l1 = run(c, "t", [1])
    run(c, "t", [2])
    assert l1.node.tier == GONE


def test_grow_takes_free_then_evicts_then_refuses():
    c = RadixKVCache(4)
    run(c, "t", [9])                            # one unlocked cached block
    lease = c.acquire("t", [1], 1, 1, 0.0)      # prompt block + first token's block
    c.commit_prompt(lease, 0.0)
    assert c.free == 1 and c.grow(lease) and c.free == 0 and c.evictions == 0
    assert c.grow(lease) and c.evictions == 1 and cached(c) == [1]      # 9 evicted
    touch = c.touch_clock
    assert not c.grow(lease)                    # nothing free, nothing evictable
    assert (c.reserved, lease.reserved, c.touch_clock, c.gpu_used) == (3, 3, touch, 1)
    c.check_invariants()
    c.release(lease)
    assert c.reserved == 0 and c.free == 3
    c.check_invariants()


def test_output_blocks_stay_locked_on_the_path_until_release():
    c = RadixKVCache(8)
    lease = c.acquire("t", [1, 2], 2, 2, 0.0)
    c.commit_prompt(lease, 0.0)
    node = c.cache_output(lease, [3, 4])
    assert node is lease.node and node.hash == 4 and lease.depth == 4 and lease.output_blocks == 2
    assert [b.hash for b in node.path()] == [1, 2, 3, 4] and all(b.lock_ref == 1 for b in node.path())
    assert c.evictable == 0 and c.peek_victims(1) == [] and c.reserved == 0
    c.check_invariants()
    assert c.release(lease) == 0                # nothing more to cache: the two are in already
    assert [b.hash for b in c.peek_victims(1)] == [4]
    c.check_invariants()


def test_output_blocks_need_the_whole_prompt_in_the_tree():
    c = RadixKVCache(8)
    lease = c.acquire("t", [1, 2], 2, 1, 0.0)
    assert c.cache_output(lease, [3]) is lease.node and lease.output_blocks == 0
    c.release(lease)
    assert cached(c) == []
    c.check_invariants()


def test_a_preempted_prefill_keeps_its_completed_blocks():
    c = RadixKVCache(8)
    run(c, "t", [1])
    lease = c.acquire("t", [1, 2, 3, 4], 4, 1, 0.0)      # hit on 1; 3 to compute + 1
    assert c.commit_prompt(lease, 0.0, upto=3) == 2       # chunks completed blocks 2 and 3
    assert not lease.committed and lease.depth == 3 and lease.reserved == 2
    c.release(lease)                                       # the preemption
    assert cached(c) == [1, 2, 3] and c.reserved == 0
    again = c.acquire("t", [1, 2, 3, 4], 4, 1, 1.0)
    assert again.gpu_hit == 3 and again.new_blocks == 1
    c.release(again)
    c.check_invariants()


class _Churn(Policy):
    """Scores that change with every epoch (the test bumps it after every call, as PBKV and
    CacheSage bump theirs on arrivals and finishes), so parents often rank behind other leaves
    and go back to the heap in the middle of an eviction."""

    name = "churn"
    dynamic = True

    def score(self, block):
        return hash((block.hash, self.epoch)) % 1000


@pytest.mark.parametrize("seed", range(20))
def test_a_heap_rebuild_during_an_eviction_keeps_the_pool_within_capacity(seed):
    """With no room for stale entries every push rebuilds the heap, in the middle of evictions
    too; the eviction must go on reading the rebuilt heap (it read a list nothing pushed to any
    more, ran out early and left the pool over capacity)."""
    rng = random.Random(seed)
    c = RadixKVCache(24, policy=_Churn())
    c.heaps.slack = -(1 << 30)
    for step in range(300):
        base = rng.randrange(6) * 100
        ids = [base + i for i in range(rng.randrange(1, 8))] + \
              [10_000 + rng.randrange(1_000_000) for _ in range(rng.randrange(0, 12))]
        lease = c.acquire("t", ids, len(ids), 1, float(step))
        if lease is None:
            continue
        assert c.gpu_used + c.reserved <= c.gpu_capacity, step
        c.commit_prompt(lease, float(step))
        c.release(lease, [], float(step))
        c.policy.epoch += 1
        c.check_invariants()

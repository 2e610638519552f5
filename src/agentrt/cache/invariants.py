"""Structural checks of a `RadixKVCache`, used by `check_invariants()` and the property tests."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentrt.cache.block import GPU, HOST

if TYPE_CHECKING:
    from agentrt.cache.radix import RadixKVCache


def check_cache(cache: "RadixKVCache") -> None:
    gpu = host = locked = 0
    live_heap = {id(b) for _, seq, b in cache.heaps.gpu if b.heap_seq == seq}
    live_host = {id(b) for _, seq, b in cache.heaps.host if b.host_seq == seq}
    for tenant, root in cache.roots.items():
        gpu_before = gpu
        assert root.parent is None and root.tier == GPU and root.lock_ref >= 1, f"root of {tenant} broken"
        stack = [root]
        while stack:
            node = stack.pop()
            n_gpu_children = 0
            child_locks = 0
            for h, child in node.children.items():
                assert child.hash == h, f"{child} filed under hash {h}"
                assert child.parent is node, f"{child} has the wrong parent"
                assert child.tenant == tenant, f"{child} of tenant {child.tenant} under tenant {tenant}"
                assert child.tier in (GPU, HOST), f"{child} is in the tree but gone"
                if node.tier == HOST:
                    assert child.tier == HOST, f"GPU block {child} under host block {node}"
                n_gpu_children += child.tier == GPU
                child_locks += child.lock_ref
                stack.append(child)
            assert node.gpu_children == n_gpu_children, (
                f"{node}: gpu_children {node.gpu_children} != {n_gpu_children}")
            assert node.lock_ref >= 0, f"{node}: negative lock_ref"
            if node.parent is None:
                continue
            assert node.lock_ref >= child_locks, f"{node}: lock_ref {node.lock_ref} < children's {child_locks}"
            if node.tier == GPU:
                gpu += 1
                locked += node.lock_ref > 0
                if node.lock_ref == 0 and n_gpu_children == 0:
                    assert id(node) in live_heap, f"evictable GPU leaf {node} missing from the eviction heap"
            else:
                host += 1
                if node.lock_ref == 0 and not node.children:
                    assert id(node) in live_host, f"host leaf {node} missing from the host heap"
        assert cache.tenant_blocks.get(tenant, 0) == gpu - gpu_before, (
            f"tenant_blocks[{tenant}] {cache.tenant_blocks.get(tenant, 0)} != {gpu - gpu_before} GPU blocks")
    assert cache.gpu_used == gpu, f"gpu_used {cache.gpu_used} != {gpu} GPU blocks in the tree"
    assert cache.host_used == host, f"host_used {cache.host_used} != {host} host blocks in the tree"
    assert cache.locked_gpu == locked, f"locked_gpu {cache.locked_gpu} != {locked}"
    assert cache.reserved >= 0, f"negative reservation {cache.reserved}"
    assert sum(cache.tenant_reserved.values()) == cache.reserved, (
        f"tenant_reserved {cache.tenant_reserved} does not add up to reserved {cache.reserved}")
    assert min(cache.tenant_reserved.values(), default=0) >= 0, f"negative reservation {cache.tenant_reserved}"
    assert cache.gpu_used + cache.reserved <= cache.gpu_capacity, (
        f"GPU over capacity: {cache.gpu_used} cached + {cache.reserved} reserved > {cache.gpu_capacity}")
    assert cache.host_used <= cache.host_capacity, (
        f"host over capacity: {cache.host_used} > {cache.host_capacity}")

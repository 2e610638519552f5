"""Prefetch into the GPU tier, off any request: a mixin of `RadixKVCache`.

A policy names the deepest block of a path it expects to be read soon; its host-tier suffix is
loaded into free GPU blocks (or, with `evict_below`, into blocks of GPU cache that rank strictly
lower), top down, and left unlocked: prefetched blocks are ordinary cache from then on.
"""

from __future__ import annotations

from agentrt.cache.block import GPU, HOST, Block


class Prefetching:
    def lookup(self, tenant: str, hash_ids: list[int]) -> Block | None:
        """The deepest block of `hash_ids`' path present in either tier (None if not even the first)."""
        node = self.roots.get(tenant)
        if node is None:
            return None
        found = None
        for h in hash_ids:
            node = node.children.get(h)
            if node is None:
                break
            found = node
        return found

    def prefetch(self, node: Block, now: float, max_blocks: int, evict_below=None) -> list[Block]:
        """Load host-tier blocks on the path to `node` into the GPU, top down, off any request.

        Uses free GPU blocks; with `evict_below`, may also evict GPU blocks whose key is strictly
        lower. Stops at the first block it cannot place. Returns the blocks loaded.
        """
        path = node.path()
        start = 0
        while start < len(path) and path[start].tier == GPU:
            start += 1
        if start == len(path) or path[start].tier != HOST or max_blocks <= 0:
            return []
        anchor = path[start - 1] if start else self.root(node.tenant)
        self._lock_path(anchor)          # keep the GPU part of the path (and what we load) in place
        loaded: list[Block] = []
        last = anchor
        for b in path[start:]:
            if b.tier != HOST or len(loaded) >= max_blocks:
                break
            b.lock_ref += 1    # keep it from host eviction while room is made (a demotion may evict the host tier)
            if self.free <= 0:
                victim = self._peek() if evict_below is not None else None
                if victim is None or not victim[0] < evict_below or self.evict(1) == 0:
                    b.lock_ref -= 1
                    if b.lock_ref == 0 and not b.children and b.host_seq == 0:
                        self._push_host(b)     # its heap entry may have been dropped while locked
                    break
            self._load(b)
            loaded.append(b)
            last = b
        if self.host_used > self.host_capacity:
            self._evict_host(self.host_used - self.host_capacity)
        self._unlock_path(last)
        return loaded

    def _lock_path(self, node: Block) -> None:
        while node is not None:
            if node.lock_ref == 0 and node.tier == GPU and node.parent is not None:
                self.locked_gpu += 1
            node.lock_ref += 1
            node = node.parent

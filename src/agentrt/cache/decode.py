"""What a decoding request does to the cache: a mixin of `RadixKVCache`.

- `grow` / `grow_all`: reserve one more GPU block each time a request's output crosses a block
  boundary: free blocks first, else unlocked blocks evicted in the policy's order; refused,
  changing nothing, when free plus evictable blocks are too few (the engine then preempts).
- `cache_output`: the output blocks a request completed extend its locked path below the
  prompt, each taking one of its reserved blocks, so that they can be tagged (the runtime's
  `CallFinished`) before `release` unlocks the path and scores its leaves.
"""

from __future__ import annotations

from agentrt.cache.block import Block
from agentrt.cache.lease import Lease


class DecodeGrowth:
    def grow(self, lease: Lease, n: int = 1) -> bool:
        """Reserve `n` more GPU blocks for a running request, evicting unlocked blocks as needed.

        Returns False, changing nothing, if free plus evictable blocks are fewer than `n` (the
        engine then preempts a request).
        """
        return self.grow_all([(lease, n)], n)

    def grow_all(self, wants: list[tuple[Lease, int]], total: int) -> bool:
        """`grow` for several leases at once (`total` = the sum of their n), all or nothing, with
        one eviction pass: the same victims as growing them one after another."""
        free = self.gpu_capacity - self.gpu_used - self.reserved
        if total > free:
            if total > free + self.gpu_used - self.locked_gpu:
                return False
            self.evict(total - free)
        self.reserved += total
        tr = self.tenant_reserved
        for lease, n in wants:
            lease.reserved += n
            tr[lease.tenant] += n
        return True

    def cache_output(self, lease: Lease, hash_ids: list[int]) -> Block:
        """Insert completed output blocks below the prompt, locked, as part of the lease's path.

        Each takes one of the lease's reserved blocks; nothing is inserted unless the whole prompt
        is in the tree (`commit_prompt`), since output blocks continue its chain. Returns the
        deepest block of the path (what the runtime tags before `release` unlocks it).
        """
        if not lease.committed or lease.released:
            return lease.node
        k = min(len(hash_ids), lease.reserved)
        lease.node = self._extend_locked(lease, hash_ids, 0, k)   # prefill.py
        lease.reserved -= k
        lease.depth += k
        lease.output_blocks += k
        return lease.node

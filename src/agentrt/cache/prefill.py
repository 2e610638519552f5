"""What a prefilling request does to the cache: a mixin of `RadixKVCache`.

- `commit_prompt`: the prompt blocks a request computed enter the tree, locked on its path; all
  at once when its prefill completes (SGLang's radix cache), the first `upto` of them when it is
  preempted mid-prefill, or chunk by chunk as they are scheduled.
- `_extend_locked`: the insertion both share with `cache_output` (`decode.py`): blocks appended
  below a lease's path, locked, each taking one of its reserved blocks.
- `extend_match`: vLLM V1 enters a prompt's blocks in its prefix cache when they are *scheduled*
  (`KVCacheManager.allocate_slots` caches the full blocks of the step's new tokens; the KV is
  written in that iteration before attention reads it), and looks a request's prefix up when the
  request itself is scheduled. So two requests that share an uncached prefix and are scheduled
  one after the other share it even if neither has finished its prefill. An engine modelling that
  (`EngineConfig.cache_at = "schedule"`) commits each chunk's full blocks as the chunk is scheduled
  and, before a request's first chunk, extends its lease over the blocks that entered the cache
  since it was admitted: they are locked on its path and replace blocks it had reserved.
"""

from __future__ import annotations

from agentrt.cache.block import GPU, Block
from agentrt.cache.lease import Lease


class PrefillCommit:
    def commit_prompt(self, lease: Lease, now: float, upto: int | None = None) -> int:
        """Insert the prompt blocks the request computed; they stay locked. Returns blocks inserted.

        `upto` (a preempted prefill) inserts only the first `upto` prompt blocks, those its
        chunks completed; the lease counts as committed once every prompt block is in.
        """
        start = lease.depth
        end = lease.n_full if upto is None or upto > lease.n_full else upto
        inserted = end - start if end > start else 0
        lease.node = self._extend_locked(lease, lease.hash_ids, start, end)
        lease.reserved -= inserted
        lease.depth += inserted
        lease.committed = lease.depth >= lease.n_full
        return inserted

    def _extend_locked(self, lease: Lease, hash_ids: list[int], start: int, end: int) -> Block:
        """Append `hash_ids[start:end]` below the lease's deepest block, each locked on its path
        and taking one of the blocks reserved for it (a block another request inserted first is
        shared and the reservation returned: `_insert_child`). Returns the new deepest block; the
        caller moves the lease's own counts."""
        node = lease.node
        tenant = lease.tenant
        clock = self.touch_clock
        created = 0
        for i in range(start, end):
            h = hash_ids[i]
            children = node.children
            child = children.get(h)
            if child is None:     # the common case, inlined: a fresh locked GPU block
                child = Block(h, node, GPU, tenant)
                children[h] = child
                node.gpu_children += 1
                child.lock_ref = 1
                clock += 1
                child.last_touch = clock
                created += 1
                node = child
            else:
                self.touch_clock = clock
                node = self._insert_child(node, h, locked=True)
                clock = self.touch_clock
        self.touch_clock = clock
        self.gpu_used += created
        tb = self.tenant_blocks
        tb[tenant] = tb.get(tenant, 0) + created
        self.locked_gpu += created
        self.reserved -= created
        self.tenant_reserved[tenant] -= created
        return node

    def extend_match(self, lease: Lease) -> int:
        """Lock the GPU blocks that follow the lease's matched prefix in the cache now, up to its
        last full prompt block, and return that many reserved blocks. Only for a lease that has
        committed nothing and fetches nothing from a peer; returns the blocks added (0 otherwise).
        Host-tier blocks end the extension (loading them is an admission's decision)."""
        if lease.depth != lease.gpu_hit + lease.host_hit or lease.remote_hit or lease.released:
            return 0
        node = lease.node
        hash_ids = lease.hash_ids
        clock = self.touch_clock
        k = 0
        for i in range(lease.depth, lease.n_full):
            child = node.children.get(hash_ids[i])
            if child is None or child.tier != GPU:
                break
            if child.lock_ref == 0:
                self.locked_gpu += 1
            child.lock_ref += 1
            clock += 1
            child.last_touch = clock
            node = child
            k += 1
        if k:
            self.touch_clock = clock
            lease.node = node
            lease.depth += k
            lease.gpu_hit += k
            lease.reserved -= k
            self.reserved -= k
            self.tenant_reserved[lease.tenant] -= k
        return k

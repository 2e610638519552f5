"""Matching a prompt again when its first chunk is scheduled: a mixin of `RadixKVCache`.

vLLM V1 enters a prompt's blocks in its prefix cache when they are *scheduled*
(`KVCacheManager.allocate_slots` caches the full blocks of the step's new tokens; the KV is
written in that iteration before attention reads it), and looks a request's prefix up when the
request itself is scheduled. So two requests that share an uncached prefix and are scheduled one
after the other share it even if neither has finished its prefill. An engine modelling that
(`EngineConfig.cache_at = "schedule"`) commits each prefill chunk's full blocks as the chunk is
scheduled (`commit_prompt(..., upto=...)`) and, before a request's first chunk, extends its
lease over the blocks that entered the cache since it was admitted (`extend_match`): they are
locked on its path and replace blocks it had reserved to compute.
"""

from __future__ import annotations

from agentrt.cache.block import GPU
from agentrt.cache.lease import Lease


class ScheduleMatch:
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

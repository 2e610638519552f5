"""The policy's view of the engine behind the server: an estimate, not an observation.

The server sees no block events. A prompt whose response ended is taken as cached (the engine just
computed or reused all its full blocks) until the engine has since computed `capacity_tokens` more
tokens for calls through this server, the earliest point at which LRU can have evicted it; an
unknown capacity (0) means "not cached" once anything else ran. Traffic that bypasses the server
and non-LRU eviction make it wrong; a wrong "not cached" costs a warm-up that hits the cache (one
cached prefill), which is the side it errs on. There is no host tier behind the server, so
prefetching policies find nothing to move.
"""

from __future__ import annotations

from agentrt.runtime.tenant_lru import TenantLRU


class CacheEstimate:
    """Which blocks the engine probably holds, from the responses seen (see module docstring)."""

    def __init__(self, capacity_tokens: int = 0, max_entries: int = 1 << 16) -> None:
        self.capacity_tokens = capacity_tokens
        self.max_entries = max_entries
        self.work = 0                                   # tokens computed for calls seen
        # (tenant, hash) -> work when last seen; split by tenant (tenant_lru.py), so one tenant's
        # huge prompts drop its own entries, not those of a tenant within its share
        self._seen = TenantLRU(max_entries)

    def add_work(self, tokens: int) -> None:
        self.work += max(0, tokens)

    def record(self, tenant: str, hash_ids: list[int]) -> None:
        self._seen.set_many(tenant, hash_ids, self.work)

    def tenant_entries(self, tenant: str) -> int:
        """Blocks of the tenant the estimate holds (resident or not: an upper bound)."""
        return self._seen.tenant_size(tenant)

    def gpu_prefix(self, tenant: str, hash_ids: list[int]) -> int:
        n = 0
        for h in hash_ids:
            at = self._seen.get((tenant, h))
            if at is None or (self.work - at >= self.capacity_tokens and self.work > at):
                break
            n += 1
        return n


class ServerView:
    """What a policy may read when it acts behind the server (runtime.actions.EngineView)."""

    __slots__ = ("now", "idle", "pcie_idle", "gpu_free", "block_size", "host_blocks", "decode_only",
                 "pcie_blocks_per_iteration", "_cache")

    def __init__(self, now: float, idle: bool, block_size: int, cache: CacheEstimate) -> None:
        self.now, self.idle, self.block_size, self._cache = now, idle, block_size, cache
        self.pcie_idle = False          # no host tier behind the server: nothing to prefetch
        self.gpu_free = 0               # unknown
        self.host_blocks = 0
        self.decode_only = False
        self.pcie_blocks_per_iteration = 0

    def tenant_entries(self, tenant: str) -> int:
        """Blocks of the tenant the estimate holds (resident or not: an upper bound)."""
        return self._seen.tenant_size(tenant)

    def gpu_prefix(self, tenant: str, hash_ids: list[int]) -> int:
        return self._cache.gpu_prefix(tenant, hash_ids)

    def lookup(self, tenant: str, hash_ids: list[int]):
        return None

    @staticmethod
    def on_host(node) -> bool:
        return False

    @staticmethod
    def host_blocks_on_path(node) -> int:
        return 0

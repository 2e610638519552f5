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

from collections import OrderedDict


class CacheEstimate:
    """Which blocks the engine probably holds, from the responses seen (see module docstring)."""

    def __init__(self, capacity_tokens: int = 0, max_entries: int = 1 << 16) -> None:
        self.capacity_tokens = capacity_tokens
        self.max_entries = max_entries
        self.work = 0                                   # tokens computed for calls seen
        self._seen: OrderedDict[tuple[str, int], int] = OrderedDict()

    def add_work(self, tokens: int) -> None:
        self.work += max(0, tokens)

    def record(self, tenant: str, hash_ids: list[int]) -> None:
        for h in hash_ids:
            self._seen[(tenant, h)] = self.work
            self._seen.move_to_end((tenant, h))
        while len(self._seen) > self.max_entries:
            self._seen.popitem(last=False)

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

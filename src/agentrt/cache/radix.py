"""A two-tier radix tree of KV blocks: the cache owns structure, a policy owns the eviction order.

Model
- One tree per tenant; blocks are keyed by chained hash ids, so a prompt's blocks form a path
  from the tenant's root. Only full blocks are cached (a prompt's partial last block is not).
- GPU tier: `gpu_capacity` blocks, shared by cached blocks and blocks reserved by running
  requests (prompt blocks being computed, the partial last block, output blocks). Host tier
  (optional, `host_capacity` blocks, as SGLang HiCache / vLLM CPU offload): receives blocks
  evicted from the GPU (exclusive tiers) and serves prefix hits by loading them back. A GPU
  block's parent is always on the GPU; a host block's children are always on the host.
- A request's lifecycle: `acquire` (lock the cached prefix, reserve the blocks its prefill
  needs), `grow` (one more block each time decoding crosses a block boundary, evicting if none is
  free; refused, changing nothing, when nothing is evictable), `commit_prompt` (computed prompt
  blocks enter the tree, locked), `cache_output` (completed output blocks extend the same locked
  path), `release` (unlock the path, return what is still reserved). A preempted request does
  the same, with what it had computed so far. (`commit_prompt` and `extend_match` are in
  `prefill.py`, `grow` and `cache_output` in `decode.py`, prefetch in `prefetch.py`, the eviction
  heaps in `heaps.py`.)
- A running request locks every block on its path (`lock_ref`). Only unlocked GPU leaves (no
  GPU children) are evicted; a parent becomes a leaf when its last GPU child goes.
- Eviction order: a heap of evictable leaves keyed by `policy.score(block)` (lowest first),
  with lazy invalidation by sequence number, so an eviction pops instead of scanning the leaves.
  Contract with the policy: a block's score changes only when the block is touched (the cache
  re-scores it on unlock) or when the policy bumps `policy.epoch` (the cache re-scores the live
  heap entries once per epoch, not once per eviction) or calls `rescore(block)`.
- The host tier evicts its leaves in LRU order.

Time is passed in (`now`); the cache's own clock is `touch_clock`, a count of block touches.
"""

from __future__ import annotations

from collections.abc import Callable

from agentrt.cache.block import GPU, HOST, Block
from agentrt.cache.heaps import EvictionHeaps
from agentrt.cache.decode import DecodeGrowth
from agentrt.cache.lease import Lease
from agentrt.cache.prefetch import Prefetching
from agentrt.cache.prefill import PrefillCommit

UNBOUNDED = 1 << 62


class _LRU:
    dynamic = False
    epoch = 0

    @staticmethod
    def score(block: Block) -> float:
        return block.last_touch


class RadixKVCache(PrefillCommit, DecodeGrowth, Prefetching, EvictionHeaps):
    """Blocks, tiers, locks and eviction heaps. See the module docstring for the model."""

    def __init__(self, gpu_capacity: int | None, host_capacity: int = 0, policy=None,
                 block_bytes: int = 0) -> None:
        if gpu_capacity is not None and gpu_capacity <= 0:
            raise ValueError(f"gpu_capacity must be > 0, got {gpu_capacity}")
        if host_capacity < 0:
            raise ValueError(f"host_capacity must be >= 0, got {host_capacity}")
        self.gpu_capacity = UNBOUNDED if gpu_capacity is None else gpu_capacity
        self.host_capacity = host_capacity
        self.block_bytes = block_bytes
        self.policy = policy if policy is not None else _LRU()
        self._score: Callable[[Block], float] = self.policy.score
        # the default policy score is the touch clock itself: read it without a call
        self._recency = getattr(type(self.policy).score, "__qualname__", "") in ("Policy.score", "_LRU.score")
        self.roots: dict[str, Block] = {}
        self.gpu_used = 0          # blocks in the tree on the GPU
        self.tenant_blocks: dict[str, int] = {}   # the same, per tenant
        self.host_used = 0
        self.reserved = 0          # GPU blocks held by running requests, not (yet) in the tree
        self.tenant_reserved: dict[str, int] = {}  # the same, per tenant
        self.locked_gpu = 0        # GPU blocks with lock_ref > 0
        self.touch_clock = 0
        self._heap: list = []
        self._host_heap: list = []
        self._seq = 0
        self._epoch = self.policy.epoch
        self.evictions = 0
        self.demotions = 0
        self.host_evictions = 0
        self.h2d_bytes = 0
        self.d2h_bytes = 0
        self.on_evict: Callable[[list[Block], bool], None] | None = None

    # ------------------------------------------------------------------ capacity
    @property
    def free(self) -> int:
        return self.gpu_capacity - self.gpu_used - self.reserved

    @property
    def evictable(self) -> int:
        return self.gpu_used - self.locked_gpu

    def root(self, tenant: str) -> Block:
        r = self.roots.get(tenant)
        if r is None:
            r = self.roots[tenant] = Block(-1, None, GPU, tenant)
            r.lock_ref = 1  # the root is never evicted
        return r

    # ------------------------------------------------------------------ lookup
    def match(self, tenant: str, hash_ids: list[int], n_full: int) -> tuple[int, int]:
        """(GPU prefix blocks, host blocks after it) for a prompt, touching nothing."""
        node = self.roots.get(tenant)
        if node is None:
            return 0, 0
        gpu = host = 0
        for i in range(n_full):
            child = node.children.get(hash_ids[i])
            if child is None:
                break
            if child.tier == GPU:
                gpu += 1
            else:
                host += 1
            node = child
        return gpu, host

    # ------------------------------------------------------------------ request lifecycle
    def acquire(self, tenant: str, hash_ids: list[int], n_full: int, extra_blocks: int,
                now: float) -> Lease | None:
        """Lock a prompt's cached prefix and reserve GPU space for the rest of the request.

        Matches the longest cached prefix (GPU blocks, then host blocks), loads the host part to
        the GPU, reserves `n_full - matched + extra_blocks` blocks (prompt blocks to compute, and
        what else its prefill needs: the partial block, the first output token's), evicting
        unlocked blocks as needed. Returns None, changing nothing, if the request cannot fit
        even after evicting everything evictable.
        """
        root = self.root(tenant)
        if n_full + extra_blocks > self.free + self.evictable and not self._fits(root, hash_ids, n_full, extra_blocks):
            return None
        clock = self.touch_clock
        node = root
        node.lock_ref += 1
        gpu_hit = 0
        for i in range(n_full):
            child = node.children.get(hash_ids[i])
            if child is None or child.tier != GPU:
                break
            node = child
            if node.lock_ref == 0:
                self.locked_gpu += 1
            node.lock_ref += 1
            clock += 1
            node.last_touch = clock
            gpu_hit += 1
        self.touch_clock = clock
        host_nodes: list[Block] = []
        h = node
        for i in range(gpu_hit, n_full):
            child = h.children.get(hash_ids[i])
            if child is None:
                break
            child.lock_ref += 1   # protect from host eviction while we make room
            host_nodes.append(child)
            h = child
        n_host = len(host_nodes)
        need = n_full - gpu_hit + extra_blocks   # host loads + blocks to compute + extra
        shortfall = need - self.free
        if shortfall > 0:
            self.evict(shortfall)
        for hn in host_nodes:
            self._load(hn)
            node = hn
        if self.host_used > self.host_capacity:
            self._evict_host(self.host_used - self.host_capacity)
        self.reserved += need - n_host
        tr = self.tenant_reserved
        tr[tenant] = tr.get(tenant, 0) + need - n_host
        return Lease(tenant=tenant, hash_ids=hash_ids, n_full=n_full, node=node, gpu_hit=gpu_hit,
                     host_hit=n_host, reserved=need - n_host, depth=gpu_hit + n_host)

    def _fits(self, root: Block, hash_ids: list[int], n_full: int, extra_blocks: int) -> bool:
        """Exact admission check (slow path): blocks needed vs free + evictable after locking."""
        node = root
        gpu_hit = unlocked = 0
        for i in range(n_full):
            child = node.children.get(hash_ids[i])
            if child is None or child.tier != GPU:
                break
            node = child
            gpu_hit += 1
            if child.lock_ref == 0:
                unlocked += 1
        need = n_full - gpu_hit + extra_blocks
        return need <= self.free + self.evictable - unlocked

    def _load(self, hn: Block) -> None:
        hn.tier = GPU
        self.host_used -= 1
        self.gpu_used += 1
        self.tenant_blocks[hn.tenant] = self.tenant_blocks.get(hn.tenant, 0) + 1
        self.locked_gpu += 1
        hn.parent.gpu_children += 1
        hn.host_seq = 0
        self.touch_clock += 1
        hn.last_touch = self.touch_clock
        self.h2d_bytes += self.block_bytes

    def release(self, lease: Lease, output_hash_ids: list[int] = (), now: float = 0.0) -> int:
        """The request finished (or was preempted): unlock its path, free its reservation.

        Unlocked leaves enter the eviction heap scored now, so tag them first (`cache_output`,
        then the runtime's `CallFinished`, then `release`). `output_hash_ids`, if given, are cached
        first (`cache_output`). Returns the output blocks that call inserted.
        """
        if lease.released:
            return 0
        before = lease.output_blocks
        if output_hash_ids:
            self.cache_output(lease, output_hash_ids)
        self.reserved -= lease.reserved
        self.tenant_reserved[lease.tenant] -= lease.reserved
        lease.reserved = 0
        self._unlock_path(lease.node)
        lease.released = True
        return lease.output_blocks - before

    def _insert_child(self, parent: Block, hash_id: int, locked: bool) -> Block:
        child = parent.children.get(hash_id)
        if child is None:
            child = Block(hash_id, parent, GPU, parent.tenant)
            parent.children[hash_id] = child
            parent.gpu_children += 1
            self.gpu_used += 1
            self.tenant_blocks[parent.tenant] = self.tenant_blocks.get(parent.tenant, 0) + 1
        elif child.tier == HOST:
            # computed again while a copy sat on the host: keep the fresh GPU copy, drop the host one
            child.tier = GPU
            child.host_seq = 0
            self.host_used -= 1
            parent.gpu_children += 1
            self.gpu_used += 1
            self.tenant_blocks[parent.tenant] = self.tenant_blocks.get(parent.tenant, 0) + 1
        else:
            # a concurrent request inserted the same block first: share it, return our reservation
            pass
        self.reserved -= 1
        self.tenant_reserved[parent.tenant] -= 1
        if locked:
            if child.lock_ref == 0:
                self.locked_gpu += 1
            child.lock_ref += 1
        self.touch_clock += 1
        child.last_touch = self.touch_clock
        return child

    def _unlock_path(self, node: Block) -> None:
        while node is not None:
            node.lock_ref -= 1
            if node.lock_ref == 0 and node.parent is not None:
                if node.tier == GPU:
                    self.locked_gpu -= 1
                    if node.gpu_children == 0:
                        self._push(node)
                elif node.tier == HOST and not node.children:
                    self._push_host(node)
            node = node.parent

    # ------------------------------------------------------------------ checking
    def check_invariants(self) -> None:
        """Verify the whole structure; raises AssertionError naming the first broken rule."""
        from agentrt.cache.invariants import check_cache
        check_cache(self)

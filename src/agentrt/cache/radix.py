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
  the same, with what it had computed so far. `commit_prompt` inserts all of a prompt's blocks
  when its prefill completes (SGLang's radix cache), the first `upto` when it is preempted
  mid-prefill, or chunk by chunk as they are scheduled (`extend_match` below).
- vLLM V1 enters a prompt's blocks in its prefix cache when they are *scheduled*
  (`KVCacheManager.allocate_slots` caches the full blocks of the step's new tokens; the KV is
  written in that iteration before attention reads it), and looks a request's prefix up when the
  request itself is scheduled, so two requests that share an uncached prefix and are scheduled
  one after the other share it even if neither has finished its prefill. An engine modelling
  that (`EngineConfig.cache_at = "schedule"`) commits each chunk's full blocks as the chunk is
  scheduled and, before a request's first chunk, `extend_match`es its lease over the blocks that
  entered the cache since it was admitted: locked on its path, replacing blocks it had reserved.
- Prefetch, off any request: a policy names the deepest block of a path it expects to be read
  soon; its host-tier suffix is loaded into free GPU blocks (or, with `evict_below`, into blocks
  of GPU cache that rank strictly lower), top down, and left unlocked: ordinary cache from then.
- A running request locks every block on its path (`lock_ref`). Only unlocked GPU leaves (no
  GPU children) are evicted; a parent becomes a leaf when its last GPU child goes.
- Eviction order: `EvictionHeaps` (`heaps.py`), a heap of evictable leaves keyed by
  `policy.score(block)` (lowest first), with lazy invalidation by sequence number, so an eviction
  pops instead of scanning the leaves. Contract with the policy: a block's score changes only
  when the block is touched (the cache re-scores it on unlock) or when the policy bumps
  `policy.epoch` (the live heap entries are re-scored once per epoch, not once per eviction) or
  calls `rescore(block)`. The host tier evicts its leaves in LRU order.

Time is passed in (`now`); the cache's own clock is `touch_clock`, a count of block touches.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

from agentrt.cache.block import GONE, GPU, HOST, Block
from agentrt.cache.heaps import EvictionHeaps
from agentrt.cache.lease import Lease

UNBOUNDED = 1 << 62


class _LRU:
    dynamic = False
    epoch = 0

    @staticmethod
    def score(block: Block) -> float:
        return block.last_touch


class RadixKVCache:
    """Blocks, tiers, locks and reservations; eviction order in `heaps`. See the module docstring."""

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
        # the default policy score is the touch clock itself: read it without a call
        recency = getattr(type(self.policy).score, "__qualname__", "") in ("Policy.score", "_LRU.score")
        self.heaps = EvictionHeaps(self.policy, self, recency)
        self.roots: dict[str, Block] = {}
        self.gpu_used = 0          # blocks in the tree on the GPU
        self.tenant_blocks: dict[str, int] = {}   # the same, per tenant
        self.host_used = 0
        self.reserved = 0          # GPU blocks held by running requests, not (yet) in the tree
        self.tenant_reserved: dict[str, int] = {}  # the same, per tenant
        self.locked_gpu = 0        # GPU blocks with lock_ref > 0
        self.touch_clock = 0
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
        lease.node = self._extend_locked(lease, hash_ids, 0, k)
        lease.reserved -= k
        lease.depth += k
        lease.output_blocks += k
        return lease.node

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

    # ------------------------------------------------------------------ tree edits
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

    def _lock_path(self, node: Block) -> None:
        while node is not None:
            if node.lock_ref == 0 and node.tier == GPU and node.parent is not None:
                self.locked_gpu += 1
            node.lock_ref += 1
            node = node.parent

    def _unlock_path(self, node: Block) -> None:
        heaps = self.heaps
        while node is not None:
            node.lock_ref -= 1
            if node.lock_ref == 0 and node.parent is not None:
                if node.tier == GPU:
                    self.locked_gpu -= 1
                    if node.gpu_children == 0:
                        heaps.push_key(node, heaps.score(node))
                elif node.tier == HOST and not node.children:
                    heaps.push_host(node)
            node = node.parent

    # ------------------------------------------------------------------ prefetch
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
                victim = self.heaps.peek() if evict_below is not None else None
                if victim is None or not victim[0] < evict_below or self.evict(1) == 0:
                    b.lock_ref -= 1
                    if b.lock_ref == 0 and not b.children and b.host_seq == 0:
                        self.heaps.push_host(b)     # its heap entry may have been dropped while locked
                    break
            self._load(b)
            loaded.append(b)
            last = b
        if self.host_used > self.host_capacity:
            self._evict_host(self.host_used - self.host_capacity)
        self._unlock_path(last)
        return loaded

    # ------------------------------------------------------------------ eviction
    def peek_victims(self, n: int) -> list[Block]:
        """The next `n` blocks eviction would take, without evicting (leaves only)."""
        return self.heaps.peek_victims(n)

    def rescore(self, block: Block) -> None:
        """Re-rank one block whose score the policy changed outside an epoch bump."""
        self.heaps.rescore(block)

    def evict(self, n: int) -> int:
        """Evict up to `n` GPU blocks (demoting them to the host tier if there is one)."""
        heaps = self.heaps
        if heaps.policy.epoch != heaps.epoch:
            heaps.refresh()
        heap = heaps.gpu
        pop = heapq.heappop
        score = heaps.score
        recency = heaps.recency
        done = 0
        removed: list[Block] = []
        notify = self.on_evict is not None
        tb = self.tenant_blocks
        demote = self.host_capacity > 0
        b: Block | None = None
        while done < n:
            if b is None:
                # the heaps' lazy invalidation (`EvictionHeaps.peek`), inlined: once per victim
                if not heap:
                    break
                _, seq, b = pop(heap)
                if b.heap_seq != seq:
                    b = None
                    continue
                if b.lock_ref or b.gpu_children or b.tier != GPU:
                    b.heap_seq = 0
                    b = None
                    continue
            b.heap_seq = 0
            parent = b.parent
            parent.gpu_children -= 1
            self.gpu_used -= 1
            tb[b.tenant] -= 1
            self.evictions += 1
            if demote:
                b.tier = HOST
                self.host_used += 1
                self.demotions += 1
                self.d2h_bytes += self.block_bytes
                if not b.children:
                    heaps.push_host(b)
                if self.host_used > self.host_capacity:
                    self._evict_host(self.host_used - self.host_capacity)
            else:
                b.tier = GONE
                del parent.children[b.hash]
            if notify:
                removed.append(b)
            done += 1
            b = None
            if parent.gpu_children == 0 and parent.lock_ref == 0 and parent.parent is not None:
                key = parent.last_touch if recency else score(parent)
                if done < n and (not heap or key < heap[0][0]):
                    b = parent        # it would be popped next anyway: skip the heap round trip
                else:
                    heaps.push_key(parent, key)
        if removed and self.on_evict is not None:
            self.on_evict(removed, demote)
        return done

    def _evict_host(self, n: int) -> int:
        heaps = self.heaps
        heap = heaps.host
        done = 0
        while done < n and heap:
            _, seq, b = heapq.heappop(heap)
            if b.host_seq != seq:
                continue
            b.host_seq = 0
            if b.tier != HOST or b.children or b.lock_ref:
                continue
            parent = b.parent
            del parent.children[b.hash]
            b.tier = GONE
            self.host_used -= 1
            self.host_evictions += 1
            done += 1
            if parent.tier == HOST and not parent.children and parent.lock_ref == 0:
                heaps.push_host(parent)
        return done

    # ------------------------------------------------------------------ checking
    def check_invariants(self) -> None:
        """Verify the whole structure; raises AssertionError naming the first broken rule."""
        from agentrt.cache.invariants import check_cache
        check_cache(self)

"""Eviction heaps of the radix KV cache: the GPU tier ranked by the policy, the host tier by LRU.

A mixin of `RadixKVCache` (kept apart so that the tree's structure and the eviction order live in
files of their own). Each evictable leaf has one live heap entry (key, sequence, block); an
entry is stale once the block's `heap_seq` moved on, was locked, gained a GPU child or left the
tier, and stale entries are dropped when popped. Keys come from `policy.score`; see the contract
in `radix.py`.
"""

from __future__ import annotations

import heapq

from agentrt.cache.block import GONE, GPU, HOST, Block


class EvictionHeaps:
    # stale entries tolerated beyond twice the GPU blocks before a push rebuilds the heap
    heap_slack = 1024

    def _peek(self):
        """(key, block) of the next eviction victim, dropping stale heap entries on the way."""
        if self.policy.epoch != self._epoch:
            self._refresh()
        heap = self._heap
        while heap:
            key, seq, b = heap[0]
            if b.heap_seq == seq and not b.lock_ref and not b.gpu_children and b.tier == GPU:
                return key, b
            heapq.heappop(heap)
            if b.heap_seq == seq:
                b.heap_seq = 0
        return None

    def _push(self, block: Block) -> None:
        self._push_key(block, self._score(block))

    def _push_key(self, block: Block, key) -> None:
        if len(self._heap) > 2 * self.gpu_used + self.heap_slack:
            self._refresh()
        self._seq += 1
        block.heap_seq = self._seq
        try:
            heapq.heappush(self._heap, (key, self._seq, block))
        except TypeError:
            # keys of another kind than the heap's: the ranker changed its order (the runtime's
            # LRU safety net switching between the policy's keys and LRU's) and bumped its epoch;
            # the entry is in the list, so re-ranking all of them now restores the heap
            if self.policy.epoch == self._epoch:
                raise
            self._refresh()

    def _push_host(self, block: Block) -> None:
        self._seq += 1
        block.host_seq = self._seq
        heapq.heappush(self._host_heap, (block.last_touch, self._seq, block))

    def rescore(self, block: Block) -> None:
        """Re-rank one block whose score the policy changed outside an epoch bump."""
        if block.tier == GPU and block.lock_ref == 0 and block.gpu_children == 0 and block.parent is not None:
            self._push(block)

    def _refresh(self) -> None:
        """New policy epoch: re-score every live heap entry once and rebuild the heap."""
        self._epoch = self.policy.epoch
        score = self._score
        fresh = []
        for _, seq, b in self._heap:
            if b.heap_seq == seq:
                if b.tier == GPU and b.lock_ref == 0 and b.gpu_children == 0:
                    fresh.append((score(b), seq, b))
                else:
                    b.heap_seq = 0
        heapq.heapify(fresh)
        # in place: `evict` holds the list, and a rebuild while it runs (a push past the size
        # bound) must not hand the blocks that become leaves to a list it never reads
        self._heap[:] = fresh

    def peek_victims(self, n: int) -> list[Block]:
        """The next `n` blocks eviction would take, without evicting (leaves only)."""
        if self.policy.epoch != self._epoch:
            self._refresh()
        live = [e for e in self._heap if e[2].heap_seq == e[1] and e[2].lock_ref == 0
                and e[2].tier == GPU and e[2].gpu_children == 0]
        return [e[2] for e in heapq.nsmallest(n, live)]

    def evict(self, n: int) -> int:
        """Evict up to `n` GPU blocks (demoting them to the host tier if there is one)."""
        if self.policy.epoch != self._epoch:
            self._refresh()
        heap = self._heap
        pop = heapq.heappop
        score = self._score
        done = 0
        removed: list[Block] = []
        notify = self.on_evict is not None
        recency = self._recency
        tb = self.tenant_blocks
        demote = self.host_capacity > 0
        b: Block | None = None
        while done < n:
            if b is None:
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
                    self._push_host(b)
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
                    self._push_key(parent, key)
        if removed and self.on_evict is not None:
            self.on_evict(removed, demote)
        return done

    def _evict_host(self, n: int) -> int:
        heap = self._host_heap
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
                self._push_host(parent)
        return done


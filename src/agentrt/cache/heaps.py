"""The eviction order of the radix KV cache: GPU leaves ranked by the policy, host leaves by LRU.

Model: each evictable leaf has one live heap entry (key, sequence, block); an entry is stale
once the block's `heap_seq` (`host_seq` on the host heap) moved on, or the block was locked,
gained a GPU child or left the tier, and stale entries are dropped when met. GPU keys come from
`policy.score` (lowest evicted first), host keys are `last_touch`. Contract with the policy (see
`radix.py`): a score changes only when the block is touched, when `policy.epoch` moves (every
live entry is re-scored once, on the next read) or through `rescore`.

`EvictionHeaps` only orders blocks; the cache (`radix.py`) decides what is a leaf, pushes them,
and takes victims off the tree. It reads the cache's `gpu_used`, which bounds the stale entries
a heap may carry before it is rebuilt.
"""

from __future__ import annotations

import heapq
from typing import Protocol

from agentrt.cache.block import GPU, Block


class Occupancy(Protocol):
    gpu_used: int


class EvictionHeaps:
    __slots__ = ("policy", "score", "recency", "gpu", "host", "seq", "epoch", "slack", "_occupancy")

    def __init__(self, policy, occupancy: Occupancy, recency: bool) -> None:
        self.policy = policy
        self.score = policy.score
        # the policy's score is the block's touch clock: callers may read `last_touch` instead
        self.recency = recency
        self.gpu: list = []          # (key, seq, block): GPU leaves, lowest key evicted first
        self.host: list = []         # (last_touch, seq, block): host leaves, LRU
        self.seq = 0
        self.epoch = policy.epoch
        # stale entries tolerated beyond twice the GPU blocks before a push rebuilds the heap
        self.slack = 1024
        self._occupancy = occupancy

    def peek(self):
        """(key, block) of the next GPU victim, dropping stale entries on the way; None if none."""
        if self.policy.epoch != self.epoch:
            self.refresh()
        heap = self.gpu
        while heap:
            key, seq, b = heap[0]
            if b.heap_seq == seq and not b.lock_ref and not b.gpu_children and b.tier == GPU:
                return key, b
            heapq.heappop(heap)
            if b.heap_seq == seq:
                b.heap_seq = 0
        return None

    def push(self, block: Block) -> None:
        self.push_key(block, self.score(block))

    def push_key(self, block: Block, key) -> None:
        if len(self.gpu) > 2 * self._occupancy.gpu_used + self.slack:
            self.refresh()
        self.seq += 1
        block.heap_seq = self.seq
        try:
            heapq.heappush(self.gpu, (key, self.seq, block))
        except TypeError:
            # keys of another kind than the heap's: the ranker changed its order (the runtime's
            # LRU safety net switching between the policy's keys and LRU's) and bumped its epoch;
            # the entry is in the list, so re-ranking all of them now restores the heap
            if self.policy.epoch == self.epoch:
                raise
            self.refresh()

    def push_host(self, block: Block) -> None:
        self.seq += 1
        block.host_seq = self.seq
        heapq.heappush(self.host, (block.last_touch, self.seq, block))

    def rescore(self, block: Block) -> None:
        """Re-rank one block whose score the policy changed outside an epoch bump."""
        if block.tier == GPU and block.lock_ref == 0 and block.gpu_children == 0 and block.parent is not None:
            self.push(block)

    def refresh(self) -> None:
        """New policy epoch: re-score every live GPU entry once and rebuild the heap."""
        self.epoch = self.policy.epoch
        score = self.score
        fresh = []
        for _, seq, b in self.gpu:
            if b.heap_seq == seq:
                if b.tier == GPU and b.lock_ref == 0 and b.gpu_children == 0:
                    fresh.append((score(b), seq, b))
                else:
                    b.heap_seq = 0
        heapq.heapify(fresh)
        # in place: an eviction holds the list, and a rebuild while it runs (a push past the size
        # bound) must not hand the blocks that become leaves to a list it never reads
        self.gpu[:] = fresh

    def peek_victims(self, n: int) -> list[Block]:
        """The next `n` GPU blocks eviction would take, without evicting (leaves only)."""
        if self.policy.epoch != self.epoch:
            self.refresh()
        live = [e for e in self.gpu if e[2].heap_seq == e[1] and e[2].lock_ref == 0
                and e[2].tier == GPU and e[2].gpu_children == 0]
        return [e[2] for e in heapq.nsmallest(n, live)]

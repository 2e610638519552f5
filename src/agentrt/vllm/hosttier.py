"""Scheduler side of the host-memory tier: which cached blocks live in host slots, and the copies.

Model (exclusive tiers, as in the simulator's cache: a block is on the GPU or on the host)
- A mirrored block that vLLM evicts is demoted: copied into a free host slot before this step's
  forward overwrites it (the worker copies in `handle_preemptions`, which vLLM runs before it
  zeroes and reuses new blocks). When the host is full, the host block the policy values least
  goes; a demoted block valued no more than that is not copied at all.
- A request whose prompt continues, past its GPU prefix hit, with blocks on the host loads them
  (a synchronous external hit: vLLM allocates the blocks, the worker copies them in
  `start_load_kv` before the forward). The slots go back to the free list once the step's copies
  are issued: a slot read by a load is never written by a save of the same step.
- `Prefetch` actions load host blocks on a path into free GPU blocks (or GPU blocks the policy
  values below `evict_below`), as vLLM cache entries the next requests hit.
Keys are vLLM's block hashes with group id (group 0: one KV cache group). The worker side is in
`worker.py`; the plan for one step travels in `AgentRTMetadata`.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from agentrt.cache.block import HOST

GROUP0 = (0).to_bytes(4, "big")


@dataclass(slots=True)
class StepPlan:
    saves: list = field(default_factory=list)    # (gpu block id, host slot)
    loads: list = field(default_factory=list)    # (host slot, gpu block id)


@dataclass(slots=True)
class HostStats:
    saved: int = 0
    loaded: int = 0
    prefetched: int = 0
    dropped: int = 0          # host blocks evicted from the host
    skipped: int = 0          # GPU evictions not worth a host slot


class HostTier:
    def __init__(self, capacity: int, score) -> None:
        self.capacity = capacity
        self.score = score
        self.free: list[int] = list(range(capacity - 1, -1, -1))
        self.slot_of: dict[bytes, int] = {}
        self.node_of: dict[int, object] = {}      # slot -> mirror node (tier HOST)
        self.plan = StepPlan()
        self._release: list[int] = []             # slots read by this step's loads
        self.stats = HostStats()

    def __len__(self) -> int:
        return len(self.slot_of)

    def has(self, key: bytes) -> bool:
        return key in self.slot_of

    # ------------------------------------------------------------------ demotion
    def demote(self, pairs: list, mirror) -> list:
        """This step's GPU evictions, (node, block id) pairs: copy the ones worth a host slot, best
        first; returns the nodes that left both tiers (for `BlocksEvicted`)."""
        gone = []
        incoming = sorted(((self.score(n), i, n, b) for i, (n, b) in enumerate(pairs)),
                          key=lambda t: t[0], reverse=True)
        heap = None
        for key, _, node, bid in incoming:
            if node.key in self.slot_of:     # recomputed while a host copy was kept: still there
                node.tier = HOST
                continue
            if not self.free:
                if heap is None:     # residents ranked once per step, lowest first
                    heap = [(self.score(n), s) for s, n in self.node_of.items()]
                    heapq.heapify(heap)
                if not heap or not heap[0][0] < key:
                    self.stats.skipped += 1
                    mirror.drop(node)
                    gone.append(node)
                    continue
                dropped = self._drop_slot(heapq.heappop(heap)[1], mirror)
                if dropped is not None:
                    gone.append(dropped)
            slot = self.free.pop()
            self.slot_of[node.key] = slot
            self.node_of[slot] = node
            node.tier = HOST
            self.plan.saves.append((bid, slot))
            self.stats.saved += 1
        return gone

    def _drop_slot(self, slot: int, mirror):
        node = self.node_of.pop(slot)
        self.slot_of.pop(node.key, None)
        self.free.append(slot)
        self.stats.dropped += 1
        if node.tier != HOST:                # back on the GPU: only the copy goes
            return None
        mirror.drop(node)
        return node

    # ------------------------------------------------------------------ loads
    def continuation(self, block_hashes, start: int, limit: int) -> list[bytes]:
        """The keys of the host blocks that continue a GPU prefix hit of `start` blocks, at most
        `limit` of them (a request never loads its last token's block: vLLM computes that one)."""
        keys = []
        slot_of = self.slot_of
        for i in range(start, min(len(block_hashes), start + max(0, limit))):
            key = bytes(block_hashes[i]) + GROUP0
            if key not in slot_of:
                break
            keys.append(key)
        return keys

    def load_hit(self, keys: list[bytes], block_ids: list[int], mirror) -> int:
        """vLLM allocated `block_ids` for a request's host hit (`keys`, from `continuation`): each
        block is copied in this step and its mirror node is back on the GPU. Returns the count."""
        for key, bid in zip(keys, block_ids):
            slot, node = self.take(key)
            self.load(slot, bid)
            mirror.promote(node)
        return min(len(keys), len(block_ids))

    def take(self, key: bytes) -> tuple[int, object]:
        """The block leaves the host (it is being loaded to the GPU): (slot, node)."""
        slot = self.slot_of.pop(key)
        node = self.node_of.pop(slot)
        self._release.append(slot)
        return slot, node

    def load(self, slot: int, block_id: int) -> None:
        self.plan.loads.append((slot, block_id))
        self.stats.loaded += 1

    def end_step(self) -> StepPlan:
        """This step's copies; slots read by its loads become free for the next step's saves."""
        plan, self.plan = self.plan, StepPlan()
        self.free.extend(self._release)
        self._release = []
        return plan

    def clear(self) -> None:
        for slot in list(self.node_of):
            self._release.append(slot)
        self.node_of.clear()
        self.slot_of.clear()

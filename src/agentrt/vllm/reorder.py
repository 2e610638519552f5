"""Put vLLM's free block queue in policy order: the block the policy values least at the head.

vLLM evicts by popping the head of `FreeKVCacheBlockQueue` (a doubly linked list through the
blocks). The queue is kept as: blocks without a hash first (vLLM reuses them first too; they hold
nothing), then hashed blocks the mirror does not know (e.g. freed by a preemption), in their
current order, then mirrored blocks sorted by `score(node)`, lowest first. The sort is stable, so
equal scores keep the queue's order, which is vLLM's LRU order.

Cost bounds
- `order()` runs only when the policy's epoch changed or blocks were freed since the last time
  (the caller decides; removals from a sorted queue leave it sorted).
- Scores are cached per (block, touch) within one policy epoch, so between epoch bumps only newly
  freed blocks are scored; and when they all sort after the queue's sorted tail (the common case
  between epoch bumps: freshly freed blocks are the most recently used), only they are visited,
  walking back from the tail: O(new blocks), not O(queue).
- Only the suffix of the queue from the first changed position is relinked; when newly freed
  blocks already sort last (the common case under LRU-like scores) nothing moves.
- A policy epoch (new keys for every block) costs a re-rank of the whole queue; re-ranks are
  spaced so that they take at most `duty` of the scheduler's time (the connector's
  `rerank_duty`, default `DUTY`: a fiftieth, so they cannot cost the engine more than 2% of its
  steps): an epoch that comes sooner after the last re-rank than (1 - duty) / duty times its
  cost is deferred, the queue keeping the
  previous epoch's keys (newly freed blocks are placed by their current ones), and the next
  call after the gap re-ranks (`pending`). Policies that bump the epoch on every arrival and
  finish (PBKV, KVFlow, CacheSage) would otherwise re-score the whole queue nearly every step.
- Hosted in vLLM's scheduler class (`scheduler.py`), the connector re-ranks while the worker runs
  the step's forward pass (`off_path`): the scheduler's own hooks then never run a full re-rank
  (`order(..., defer_full=True)` places newly freed blocks only and leaves the epoch pending),
  and `order(..., force=True)` from the forward window runs the pending one without the duty
  cycle, since it no longer delays a step; the caller skips it when the last full re-rank took
  longer than the last forward pass (`last_full_s`).
- The runtime's LRU safety net switches between the policy's keys and LRU's (a new epoch): when
  that epoch's re-rank is deferred, keys of the two kinds would meet in one comparison; the
  re-rank then runs at once (a switch is rare).
All scoring happens before the queue is touched, so a failing policy leaves the queue as it was.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

DUTY = 0.02     # the most of the scheduler's time full re-ranks may take (the default)


@dataclass(slots=True)
class Stopwatch:
    """Time spent on one kind of work: the total and the longest single stretch (seconds)."""
    seconds: float = 0.0
    max_seconds: float = 0.0

    def add(self, dt: float) -> None:
        self.seconds += dt
        if dt > self.max_seconds:
            self.max_seconds = dt


@dataclass(slots=True)
class ReorderStats:
    runs: int = 0            # times the queue was examined
    relinks: int = 0         # times blocks were moved
    moved: int = 0           # blocks relinked, in total
    scored: int = 0          # score() calls
    deferred: int = 0        # epoch changes whose re-rank waited (the duty cycle)
    time: Stopwatch = field(default_factory=Stopwatch)


class QueueOrderer:
    def __init__(self, queue, score: Callable, by_block: dict,
                 clock: Callable[[], float] = time.perf_counter, duty: float = DUTY) -> None:
        if not 0.0 < duty <= 1.0:
            raise ValueError(f"duty must be in (0, 1], got {duty}")
        self.queue = queue
        self.duty = duty
        self.score = score
        self.by_block = by_block
        self.clock = clock
        self.pending = False          # an epoch's re-rank is deferred: call `order` again
        self._next_full = float("-inf")   # when the next full re-rank may run (clock time)
        self._epoch: object = None
        self._keys: dict[int, tuple[int, object]] = {}   # block_id -> (last_touch, key)
        self._tail: tuple | None = None    # (block, hash, key) of the sorted queue's last block
        self.last_full_s = 0.0             # how long the last full re-rank took (clock seconds)
        self.stats = ReorderStats()

    def _key(self, node, bid: int):
        hit = self._keys.get(bid)
        if hit is not None and hit[0] == node.last_touch:
            return hit[1]
        k = self.score(node)
        self._keys[bid] = (node.last_touch, k)
        self.stats.scored += 1
        return k

    def order(self, epoch, defer_full: bool = False, force: bool = False) -> int:
        """Sort the queue for policy `epoch`; returns the number of blocks relinked. `defer_full`:
        a new epoch's full re-rank waits (pending) whatever the duty cycle allows; `force`: it
        runs now whatever the duty cycle says."""
        t0 = time.perf_counter()
        try:
            return self._order(epoch, defer_full, force)
        finally:
            self.stats.runs += 1
            self.stats.time.add(time.perf_counter() - t0)

    def _order(self, epoch, defer_full: bool = False, force: bool = False) -> int:
        try:
            return self._order_deferring(epoch, defer_full, force)
        except TypeError:
            if epoch == self._epoch:
                raise
            # keys of two kinds in one queue: the runtime's LRU safety net switched between the
            # policy's keys and LRU's (a new epoch) while this re-rank was deferred; rank it all
            self._keys = {}
            self._epoch = epoch
            self._tail = None
            self.pending = False
            return self._rank()

    def _order_deferring(self, epoch, defer_full: bool = False, force: bool = False) -> int:
        if epoch != self._epoch:
            t0 = self.clock()
            if self._tail is None or force or (t0 >= self._next_full and not defer_full):
                self._keys = {}
                self._epoch = epoch
                self._tail = None
                self.pending = False
                try:
                    return self._rank()
                finally:
                    t1 = self.clock()
                    self.last_full_s = t1 - t0
                    self._next_full = t1 + (t1 - t0) * (1.0 - self.duty) / self.duty
            # too soon: the previous epoch's keys stay, newly freed blocks are placed
            self.pending = True
            self.stats.deferred += 1
        if self._tail is not None and self._appended_in_order():
            return 0
        return self._rank()

    def _rank(self) -> int:
        q = self.queue
        blocks = q.get_all_free_blocks()
        n = len(blocks)
        by_block = self.by_block
        head: list = []          # unhashed, then unknown hashed, in queue order
        mirrored: list = []
        keys: list = []
        n_unhashed = 0
        for b in blocks:
            h = b.block_hash
            if h is None:
                head.insert(n_unhashed, b)
                n_unhashed += 1
                continue
            node = by_block.get(b.block_id)
            if node is None or node.key != h:
                head.append(b)
            else:
                mirrored.append(b)
                keys.append(self._key(node, b.block_id))
        idx = sorted(range(len(mirrored)), key=keys.__getitem__)
        new = head + [mirrored[i] for i in idx]
        self._tail = None
        if idx:
            last = mirrored[idx[-1]]
            self._tail = (last, last.block_hash, keys[idx[-1]])
        first = 0
        while first < n and blocks[first] is new[first]:
            first += 1
        if first == n:
            return 0
        if q.num_free_blocks != n:
            raise RuntimeError("free block queue changed while it was being ordered")
        moved = new[first:]
        for b in moved:
            q.remove(b)
        q.append_n(moved)
        self.stats.relinks += 1
        self.stats.moved += len(moved)
        if len(self._keys) > 4 * max(n, 1024):   # keys of blocks long gone
            self._keys = {}
        return len(moved)

    def _appended_in_order(self, limit: int = 4096) -> bool:
        """Same epoch: are the blocks freed since the last order all mirrored and already in
        order after the old sorted tail? (Removals never unsort the queue.)"""
        tail_block, tail_hash, tail_key = self._tail
        node = self.by_block.get(tail_block.block_id)
        if (tail_block.ref_cnt != 0 or tail_block.block_hash != tail_hash or node is None
                or self._keys.get(tail_block.block_id, (None,))[0] != node.last_touch):
            return False            # the old tail left the queue (or came back): start over
        head = self.queue.fake_free_list_head
        fresh = []
        b = self.queue.fake_free_list_tail.prev_free_block
        while b is not tail_block:
            if b is None or b is head or len(fresh) >= limit:
                return False
            fresh.append(b)
            b = b.prev_free_block
        prev = tail_key
        by_block = self.by_block
        for b in reversed(fresh):
            node = by_block.get(b.block_id)
            if node is None or node.key != b.block_hash:
                return False
            k = self._key(node, b.block_id)
            if k < prev:
                return False
            prev = k
        if fresh:
            b = fresh[0]
            self._tail = (b, b.block_hash, prev)
        return True

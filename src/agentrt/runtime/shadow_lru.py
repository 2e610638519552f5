"""A sampled shadow LRU: what the engine's own LRU would hold, on the stream the engine really sees.

Model (SHARDS, Waldspurger et al., FAST 2015: spatial sampling by a hash of the key; a cache of
the sampled keys scaled by the sampling rate R estimates the full cache's hit ratio)
- Sampling is `key_sampler.py`'s. R starts at 1 and halves whenever the shadow passes
  2 x `target` keys, dropping the keys above the new threshold (SHARDS_max's fixed-size
  sampling), so the shadow holds `target` to 2 x `target` keys whatever the cache's size.
- Its content is what a prefix cache under LRU would hold, with the engine's locks: a call pins
  its prompt's sampled keys from its admission to its finish (a running request's blocks are not
  evictable), the prompt's keys enter at `PromptCached` (or at the finish, for engines that cache
  a prompt only then), the call's output keys at its finish; and the whole path is touched at the
  finish, leaf first. That last rule is the engines' LRU order: vLLM frees a finished request's
  blocks deepest first to the tail of its free queue; the simulator's radix cache evicts only
  leaves, so a path goes when its newest block would, which is its finish; touching leaf first
  keeps every parent more recent than its children, so the flat shadow evicts leaves first too.
- Its size follows the real cache's: at most R x `cached()` keys (the blocks the engine caches
  now), so it evicts when the engine does, as much. Evicted: the least recently touched unpinned
  key (a heap with lazy deletion).
- A call's shadow hit is its sampled prompt keys up to the first one missing (a prefix cache
  serves only a prefix); its real hit is the sampled keys inside the engine's reported GPU hit.
Cost: hashing the blocks a thread's prompt adds, then dict and heap work for the sampled ones
only; state is bounded by 2 x `target` keys, the pins of calls in flight and one sampled prompt
per live thread.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections.abc import Callable

from agentrt.runtime.key_sampler import KeySampler


class ShadowLRU:
    __slots__ = ("target", "cached", "sampler", "touch", "pins", "heap", "clock", "calls")

    def __init__(self, cached: Callable[[], int] | None, target: int = 1024) -> None:
        if target < 16:
            raise ValueError(f"target must be >= 16 sampled keys, got {target}")
        self.cached = cached              # the engine's cached blocks now
        self.target = target
        self.sampler = KeySampler()
        self.touch: dict[int, int] = {}   # sampled key -> its last touch (own clock)
        self.pins: dict[int, int] = {}    # sampled key -> calls in flight holding it
        self.heap: list[tuple[int, int]] = []   # (touch, key) of unpinned keys, lazily deleted
        self.clock = 0
        self.calls: dict[int, list[int]] = {}   # call id -> its pinned prompt keys, root first

    @property
    def rate(self) -> float:
        return self.sampler.rate

    # ------------------------------------------------------------------ a call's lifecycle
    def admitted(self, info, gpu_hit: int) -> tuple[int, int, int]:
        """The call got `gpu_hit` blocks from the engine's GPU. Returns (sampled blocks, of them
        hits in the engine, hits in the shadow) and pins the prompt's sampled keys."""
        p = self.sampler.prompt(info.tenant, info.workflow, info.agent, info.hash_ids, info.n_full)
        touch = self.touch
        shadow = 0
        for k in p.keys:
            if k not in touch:
                break
            shadow += 1
        if info.rid not in self.calls:      # admitted again after a preemption: pinned already
            self.calls[info.rid] = p.keys
            pins = self.pins
            for k in p.keys:
                pins[k] = pins.get(k, 0) + 1
        return len(p.keys), bisect_left(p.pos, gpu_hit), shadow

    def prompt_cached(self, rid: int) -> None:
        """The call's computed prompt blocks entered the engine's cache (pinned until it finishes;
        their order is set at the finish)."""
        keys = self.calls.get(rid)
        if keys:
            touch = self.touch
            clock = self.clock
            for k in keys:
                if k not in touch:
                    clock += 1
                    touch[k] = clock
            self.clock = clock
            self.trim()

    def finished(self, info, node) -> None:
        """The call finished with `node` its deepest cached block: its path (prompt, then its
        output blocks) is touched leaf first and unpinned."""
        keys = self.calls.pop(info.rid, None)
        if keys is None:
            return
        out: list[int] = []
        hashes = []
        while node is not None and node.depth > info.n_full:
            hashes.append(node.hash)
            node = node.parent
        if hashes:
            hashes.reverse()
            out = self.sampler.keys_of(info.tenant, hashes)
        # appending touches newer than every entry keeps the heap a heap (no sifting)
        touch, pins, heap = self.touch, self.pins, self.heap
        clock = self.clock
        for k in reversed(out):
            clock += 1
            touch[k] = clock
            heap.append((clock, k))
        for k in reversed(keys):            # leaf first: parents end up more recent
            clock += 1
            touch[k] = clock
            c = pins[k] - 1
            if c:
                pins[k] = c
            else:
                del pins[k]
                heap.append((clock, k))
        self.clock = clock
        self._reheap()
        self.trim()

    def forget(self, rid: int) -> None:
        """A call that will not finish here (its engine dropped it): release its pins."""
        for k in self.calls.pop(rid, None) or ():
            c = self.pins[k] - 1
            if c:
                self.pins[k] = c
            else:
                del self.pins[k]
                if k in self.touch:
                    heapq.heappush(self.heap, (self.touch[k], k))

    def workflow_ended(self, tenant: str, workflow: str) -> None:
        self.sampler.forget(tenant, workflow)

    # ------------------------------------------------------------------ size
    def trim(self) -> None:
        """Evict least recently touched unpinned keys down to R x the engine's cached blocks."""
        while len(self.touch) > 2 * self.target and self.sampler.bits < 40:
            self._halve_rate()
        cap = int(self.cached() * self.sampler.rate)
        touch, pins, heap = self.touch, self.pins, self.heap
        while len(touch) > cap and heap:
            t, k = heapq.heappop(heap)
            if touch.get(k) == t and k not in pins:
                del touch[k]

    def _halve_rate(self) -> None:
        """Sample half as many keys: drop the keys above the new threshold everywhere."""
        self.sampler.halve()
        thr = self.sampler.threshold
        self.touch = {k: t for k, t in self.touch.items() if k < thr}
        self.pins = {k: c for k, c in self.pins.items() if k < thr}
        for rid, keys in self.calls.items():
            self.calls[rid] = [k for k in keys if k < thr]
        self.heap = []
        self._reheap(force=True)

    def _reheap(self, force: bool = False) -> None:
        """Rebuild the heap from the live keys when stale entries outnumber them."""
        if force or len(self.heap) > 4 * len(self.touch) + 1024:
            pins = self.pins
            self.heap = [(t, k) for k, t in self.touch.items() if k not in pins]
            heapq.heapify(self.heap)

    def state_bytes(self) -> int:
        return (90 * len(self.touch) + 70 * len(self.pins) + 40 * len(self.heap)
                + sum(8 * len(v) + 60 for v in self.calls.values()) + self.sampler.state_bytes())

"""What the Ray router knows of one vLLM replica: a `cluster.routing.ReplicaView` over its KV
cache and its in-flight calls.

Model
- KV cache, from vLLM's own KV events (`--kv-events-config`, ZMQ publisher; `kv_events.py`):
  `BlockStored` adds blocks (ids recomputed from the event's token ids and parent, see
  `blocks.py`), `BlockRemoved` evicts them, `AllBlocksCleared` empties the mirror. Only GPU-tier
  blocks of KV group 0 count (no hybrid-attention models, no offload tiers).
- Between routing a call and vLLM's event for its prefill (a few milliseconds to a scheduler
  step under load), its prompt blocks are held as *provisional*: counted as cached for
  `provisional_s`, then dropped unless an event confirmed them. This lets the next call of a
  workflow that arrives at once still follow it. Once the call has finished, its blocks no
  event confirmed stay provisional for `confirm_grace_s` more at most: a call vLLM refused or
  failed stored nothing, and its blocks must not keep drawing its workflow there. Provisional
  blocks are kept in expiry order, so expired ones leave from the front: O(expired) per tick.
- Without events (`events=False`: a replica that does not publish them, or before its endpoint
  is known) the state is a model of vLLM's LRU cache fed by what was routed there: a routed
  prompt's blocks become resident, the tail block most recently used last as vLLM frees them,
  and the least recently used are evicted beyond `capacity_blocks`. It cannot see evictions
  caused by other traffic, which is why events are the default.
- Load is what this router sent and has not seen finish: every such call counts as running
  (vLLM admits up to `max_num_seqs`, far above a router's concurrency here), and
  `queued_tokens` is their prompt tokens not predicted cached, less what `prefill_tokens_per_s`
  (the deployment's figure, `ClusterHints`) computed since each was routed, calls served one
  after another: an estimate, as the routers' docs allow (vLLM reports no per-request progress).
Single-threaded: the router's event loop calls everything here (the listener thread only
queues decoded event batches, which the router applies before each decision).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from agentrt.ray.blocks import block_hash, salt_seed

GPU_MEDIA = (None, "GPU", "gpu")


@dataclass(slots=True)
class ReplicaState:
    block_size: int
    capacity: int = 0                 # GPU blocks (0: unknown, no model eviction)
    events: bool = False              # fed by KV events (else a model of what was routed)
    provisional_s: float = 30.0
    now: float = 0.0
    resident: OrderedDict = field(default_factory=OrderedDict)   # id -> None, LRU first
    by_vllm: dict = field(default_factory=dict)                  # vLLM hash -> id
    provisional: OrderedDict = field(default_factory=OrderedDict)   # id -> expiry time, by expiry
    prefill_tokens_per_s: float = 20_000.0
    confirm_grace_s: float = 2.0
    # request key -> (uncached tokens, routed at, its provisional ids), in routing order
    inflight: dict = field(default_factory=dict)
    queued_total: int = 0             # sum of the in-flight calls' uncached tokens
    evicted: int = 0
    unresolved: int = 0               # stored blocks whose parent was unknown (missed events)
    stored: int = 0

    # ReplicaView -------------------------------------------------------------------------
    def cached_blocks(self, tenant: str, hash_ids: Sequence[int]) -> int:
        # tenant isolation is already in the ids (the chain starts from the request's salt)
        n = 0
        for h in hash_ids:
            if h in self.resident:
                n += 1
                continue
            expiry = self.provisional.get(h)
            if expiry is None or expiry < self.now:
                break
            n += 1
        return n

    @property
    def running(self) -> int:
        return len(self.inflight)

    @property
    def waiting(self) -> int:
        return 0

    @property
    def queued_tokens(self) -> int:
        if not self.inflight:
            return 0
        # prefill runs the queue in routing order: the speed drains the oldest calls first (the
        # first in flight was routed earliest: `now` never goes back)
        oldest = next(iter(self.inflight.values()))[1]
        done = (self.now - oldest) * self.prefill_tokens_per_s
        return max(0, int(self.queued_total - done))

    @property
    def free_blocks(self) -> int:
        if not self.capacity:
            return 0
        return max(0, self.capacity - len(self.resident) - len(self.provisional))

    @property
    def capacity_blocks(self) -> int:
        return self.capacity

    @property
    def evicted_blocks(self) -> int:
        return self.evicted

    # what the router tells it ------------------------------------------------------------
    def tick(self, now: float) -> None:
        self.now = max(self.now, now)
        p = self.provisional
        while p:
            h = next(iter(p))
            if p[h] >= self.now:
                break
            del p[h]

    def note_routed(self, key: str, hash_ids: Sequence[int], prompt_tokens: int) -> None:
        cached = self.cached_blocks("", hash_ids)
        uncached = max(0, prompt_tokens - cached * self.block_size)
        again = self.inflight.pop(key, None)     # routed anew: counted once, and last in order
        self.queued_total += uncached - (again[0] if again is not None else 0)
        added = tuple(hash_ids[cached:]) if self.events else ()
        self.inflight[key] = (uncached, self.now, added)
        if self.events:
            expiry = self.now + self.provisional_s
            p = self.provisional
            for h in added:
                p[h] = expiry
                p.move_to_end(h)
            return
        for h in reversed(hash_ids):    # the first block ends most recently used, as in vLLM
            self.resident[h] = None
            self.resident.move_to_end(h)
        while self.capacity and len(self.resident) > self.capacity:
            self.resident.popitem(last=False)
            self.evicted += 1

    def note_finished(self, key: str) -> None:
        got = self.inflight.pop(key, None)
        if got is None:
            return
        self.queued_total -= got[0]
        # what no event confirmed by now was likely never stored (a refused or failed call):
        # it stops counting soon (it leaves the table when its first expiry comes to the front)
        p, soon = self.provisional, self.now + self.confirm_grace_s
        for h in got[2]:
            t = p.get(h)
            if t is not None and t > soon and h not in self.resident:
                p[h] = soon

    # vLLM KV events ----------------------------------------------------------------------
    def apply(self, events: Iterable[dict]) -> None:
        for ev in events:
            kind = ev.get("type")
            if ev.get("medium") not in GPU_MEDIA or ev.get("group_idx") not in (None, 0):
                continue
            if kind == "BlockStored":
                self._stored(ev)
            elif kind == "BlockRemoved":
                for vh in ev.get("block_hashes") or ():
                    h = self.by_vllm.pop(vh, None)
                    if h is not None and h in self.resident:
                        del self.resident[h]
                        self.evicted += 1
            elif kind == "AllBlocksCleared":
                self.resident.clear()
                self.by_vllm.clear()
                self.provisional.clear()

    def _stored(self, ev: dict) -> None:
        hashes = ev.get("block_hashes") or ()
        tokens = ev.get("token_ids") or ()
        size = ev.get("block_size") or self.block_size
        parent = ev.get("parent_block_hash")
        if parent is None:
            prev = salt_seed(_salt(ev.get("extra_keys")))
        elif parent in self.by_vllm:
            prev = self.by_vllm[parent]
        else:
            self.unresolved += len(hashes)
            return
        for i, vh in enumerate(hashes):
            chunk = tokens[i * size:(i + 1) * size]
            if len(chunk) < size:
                break
            prev = block_hash(prev, chunk)
            self.by_vllm[vh] = prev
            self.resident[prev] = None
            self.resident.move_to_end(prev)
            self.provisional.pop(prev, None)
            self.stored += 1


def _salt(extra_keys) -> str | None:
    """The `cache_salt` of a chain's first block: the string among its extra keys."""
    if not extra_keys or not extra_keys[0]:
        return None
    strings = [k for k in extra_keys[0] if isinstance(k, str)]
    return strings[-1] if strings else None

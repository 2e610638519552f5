"""Offline hit-rate bounds over a replay's block-access stream: Belady (MIN with bypass) and infinite.

The stream is what the simulator recorded, in order: each admitted user call's prompt (its full
blocks, a prefix hit counts the leading cached blocks, capped at input_length - 1 tokens as the
engine does) and, when it finishes, its output blocks (inserted, never hits themselves).

`belady`: a clairvoyant cache of the same GPU capacity that may keep any block it has seen and,
after every reference, drops the blocks whose next prompt reference is farthest (never-again
first; a block may be dropped at once: bypass). A child's next use is never earlier than its
parent's (a prompt that reaches the child passes the parent), and ties drop the deeper block
first, so the kept set stays prefix-closed: no child is kept without its parent. It has no locks
and no in-flight reservations, so on the same stream it bounds every demand-paging policy the
simulator runs (policies that prefetch or warm up may exceed it; see docs/engine.md).
`infinite`: every block ever seen stays.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

INF = 1 << 62


@dataclass(slots=True)
class BoundResult:
    prompt_tokens: int
    hit_tokens: int

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


def intern_stream(stream: list, ids: dict | None = None) -> list[tuple[list[int], int, bool]]:
    """Map (tenant, hash id) to dense ints: [(ids, input_length or start depth, is_prompt)].
    `ids`: the mapping to extend (a caller that interns more blocks later passes its own)."""
    ids = {} if ids is None else ids
    out = []
    for tenant, hashes, n, is_prompt in stream:
        keyed = [ids.setdefault((tenant, h), len(ids)) for h in hashes]
        out.append((keyed, n, is_prompt))
    return out


def prefix_hits(blocks: list[int], cached) -> int:
    n = 0
    for b in blocks:
        if b not in cached:
            break
        n += 1
    return n


def infinite_bound(stream: list, block_size: int) -> BoundResult:
    seen: set = set()
    prompt = hits = 0
    for tenant, hashes, n, is_prompt in stream:
        keys = [(tenant, h) for h in hashes]
        if is_prompt:
            prompt += n
            hits += min(prefix_hits(keys, seen) * block_size, n - 1)
        seen.update(keys)
    return BoundResult(prompt, hits)


def belady_bound(stream: list, block_size: int, capacity: int) -> BoundResult:
    refs = intern_stream(stream)
    # next prompt reference of every (reference, block), by a backward pass
    next_use: dict[int, int] = {}
    nxt: list[list[int]] = [None] * len(refs)  # type: ignore[list-item]
    for i in range(len(refs) - 1, -1, -1):
        blocks, _, is_prompt = refs[i]
        nxt[i] = [next_use.get(b, INF) for b in blocks]
        if is_prompt:
            for b in blocks:
                next_use[b] = i
    cached: dict[int, int] = {}       # block -> its live next-use key
    depth: dict[int, int] = {}
    heap: list = []                   # (-next_use, -depth, block)
    prompt = hits = 0
    for i, (blocks, n, is_prompt) in enumerate(refs):
        if is_prompt:
            prompt += n
            hits += min(prefix_hits(blocks, cached) * block_size, n - 1)
            depth0 = 0
        else:
            depth0 = n
        for j, b in enumerate(blocks):
            key = nxt[i][j]
            cached[b] = key
            depth[b] = depth0 + j
            heapq.heappush(heap, (-key, -(depth0 + j), b))
        while len(cached) > capacity:
            negkey, _, b = heapq.heappop(heap)
            if cached.get(b) == -negkey:
                del cached[b]
        if len(heap) > 4 * len(cached) + 1024:
            heap = [(-k, -depth[b], b) for b, k in cached.items()]
            heapq.heapify(heap)
    return BoundResult(prompt, hits)

"""An offline hit-rate bound that keeps running requests' blocks: MIN with held blocks.

`belady` (`offline.py`) may drop any block at any time, so it ignores the GPU memory that
running requests hold; on long prompts with many calls in flight that memory is most of the
pool, and the bound is far above any engine. This bound adds it back from the replay itself:
the simulator records, beside its block stream, when each user call's prompt blocks were held
(`Simulator.holds`: from admission, or re-admission after a preemption, until the call finishes
or is preempted). While held a block cannot be dropped; once released it competes as in MIN.

Model: one cache of `capacity` blocks over the stream; a prompt reference counts its leading
cached blocks (capped at input_length - 1 tokens) and loads the rest; held blocks stay; after
every step, while over capacity, the unheld block whose next prompt reference is farthest is
dropped (never-again first, deeper first on ties, as in `belady`; a block may be dropped at
once). Why it bounds: the holds are fixed by the replay (a call's blocks are held whether they
hit or missed), so any cache that keeps them and fits `capacity` is a schedule of this problem,
and MIN's exchange argument (keep the blocks needed soonest) goes through with the held ones
set aside. On a cluster the union of the replicas' caches is such a cache of the pooled memory
(`cluster.bounds`). The bound is for that stream's order and its holds; held blocks are
counted once even when two replicas hold copies, which only loosens it. It counts what the
replay held, so a policy that prefetches or warms up blocks outside a call may exceed it.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Sequence

from agentrt.bounds.offline import INF, BoundResult, intern_stream, prefix_hits


def held_belady_bound(stream: Sequence, holds: Sequence, block_size: int, capacity: int) -> BoundResult:
    """MIN over `stream` (entries as in `offline.py`) keeping `holds` resident. A hold is
    (position, request key, +1 held / -1 released, tenant, hash ids on +1): it applies after the
    stream entry at that position (-1: before the first), in the order recorded."""
    ids: dict = {}
    refs = intern_stream(stream, ids)
    uses: dict[int, list[int]] = {}        # block -> stream positions of its prompt references
    for i, (keyed, _, is_prompt) in enumerate(refs):
        if is_prompt:
            for b in keyed:
                uses.setdefault(b, []).append(i)

    def next_use(b: int, after: int) -> int:
        u = uses.get(b)
        if not u:
            return INF
        k = bisect.bisect_right(u, after)
        return u[k] if k < len(u) else INF

    cached: dict[int, int] = {}            # block -> its live next-use key
    depth: dict[int, int] = {}
    held: dict[int, int] = {}              # block -> calls holding it
    by_call: dict = {}                     # request key -> the blocks it holds
    heap: list = []                        # (-next use, -depth, block), unheld candidates
    h = 0

    def keep(b: int, at: int, d: int) -> None:
        key = cached[b] = next_use(b, at)
        depth[b] = d
        heapq.heappush(heap, (-key, -d, b))

    def apply_holds(upto: int) -> None:
        nonlocal h
        while h < len(holds) and holds[h][0] <= upto:
            _, call, sign, tenant, hashes = holds[h]
            h += 1
            if sign > 0:
                blocks = [ids.setdefault((tenant, x), len(ids)) for x in hashes]
                by_call.setdefault(call, []).extend(blocks)
                for d, b in enumerate(blocks):
                    held[b] = held.get(b, 0) + 1
                    if b not in cached:
                        keep(b, upto, d)
            else:
                for b in by_call.pop(call, ()):
                    left = held[b] - 1
                    if left:
                        held[b] = left
                        continue
                    del held[b]
                    if b in cached:
                        keep(b, upto, depth[b])

    prompt = hits = 0
    apply_holds(-1)
    for i, (blocks, n, is_prompt) in enumerate(refs):
        if is_prompt:
            prompt += n
            hits += min(prefix_hits(blocks, cached) * block_size, n - 1)
            d0 = 0
        else:
            d0 = n
        for j, b in enumerate(blocks):
            keep(b, i, d0 + j)
        apply_holds(i)
        while len(cached) > capacity and heap:
            negkey, _, b = heapq.heappop(heap)
            if cached.get(b) == -negkey and b not in held:
                del cached[b]
        if len(heap) > 4 * len(cached) + 1024:
            heap = [(-k, -depth[b], b) for b, k in cached.items() if b not in held]
            heapq.heapify(heap)
    return BoundResult(prompt, hits)

"""The runtime's actions inside vLLM: what a policy's `act` sees, and prefetches carried out.

- `EngineView` answers a policy's `act` (see `agentrt.runtime.actions.EngineView`): idle = no
  request waiting for admission; decode-only = the step scheduled no prompt tokens; the host
  "link" is always idle (copies are synchronous) and moves `prefetch_blocks` blocks per step.
- `prefetch(h, action)` loads the host blocks on the path to `action.node`, top-down, into GPU
  blocks taken from the head of the free queue: blocks without a hash, then (only with
  `evict_below`) cached blocks the policy scores strictly below it. The queue is in policy order,
  so the head is exactly what the policy would evict first. The new blocks enter vLLM's prefix
  cache under the path's hashes and go back to the free queue (cached, unreferenced), the copies
  ride this step's metadata. The path's GPU ancestors are held (out of the queue) meanwhile, so
  the prefetch never evicts its own prefix, and touched after. A path whose parent is not on the
  GPU is useless to vLLM's prefix match and is skipped.
- `WarmUp` needs a new request, which only a server can send (`agentrt serve`): counted only.
- `run(h, so)`: after a schedule step, asks the runtime for its actions (timed as runtime time)
  and carries them out, counting each kind.
"""

from __future__ import annotations

import time

from agentrt.cache.block import GPU, HOST, host_run
from agentrt.runtime.actions import Prefetch, WarmUp


class EngineView:
    __slots__ = ("_h", "now", "idle", "pcie_idle", "gpu_free", "block_size", "host_blocks",
                 "decode_only", "pcie_blocks_per_iteration")

    def __init__(self, h, so) -> None:
        self._h = h
        self.now = h.now()
        self.idle = not h._waiting
        self.pcie_idle = True
        self.gpu_free = h.pool.get_num_free_blocks()
        self.block_size = h.block_size
        self.host_blocks = h.cfg.host_blocks if h.host is not None else 0
        new = getattr(so, "scheduled_new_reqs", None) or ()
        per_req = getattr(so, "num_scheduled_tokens", None) or {}
        self.decode_only = not new and max(per_req.values(), default=0) <= 1
        self.pcie_blocks_per_iteration = h.cfg.prefetch_blocks if h.host is not None else 0

    def gpu_prefix(self, tenant: str, hash_ids: list[int]) -> int:
        return self._h.mirror.prefix(hash_ids)

    def lookup(self, tenant: str, hash_ids: list[int]):
        return self._h.mirror.lookup(hash_ids)

    @staticmethod
    def on_host(node) -> bool:
        return node is not None and node.tier == HOST

    host_blocks_on_path = staticmethod(host_run)


def _host_path(node, root) -> list:
    """Host nodes from the first one below a GPU-cached ancestor down to `node`; [] if broken."""
    path = []
    while node is not None and node.tier == HOST:
        path.append(node)
        node = node.parent
    if node is None or not (node is root or node.tier == GPU):
        return []
    path.reverse()
    return path


def _room(h, n: int, evict_below) -> int:
    """Blocks at the head of the free queue a prefetch may take (at most n)."""
    q = h.pool.free_block_queue
    tail = q.fake_free_list_tail
    b = q.fake_free_list_head.next_free_block
    room = 0
    while room < n and b is not None and b is not tail:
        if b.block_hash is not None:
            if evict_below is None:
                break
            node = h.mirror.by_block.get(b.block_id)
            if node is None or not h._score(node) < evict_below:
                break
        room += 1
        b = b.next_free_block
    return room


def prefetch(h, a) -> int:
    """Carry out one `Prefetch`; returns the blocks loaded."""
    pool, mirror = h.pool, h.mirror
    path = _host_path(a.node, mirror.root)[:max(0, a.max_blocks)]
    if not path:
        return 0
    ancestors = []
    p = path[0].parent
    while p is not None and p is not mirror.root:
        ancestors.append(p)
        p = p.parent
    ancestors.reverse()
    held = []                                    # the path's GPU prefix, held while we allocate
    for anc in ancestors:
        found = pool.get_cached_block(anc.key[:-4], [0])
        if not found:
            return 0
        held.append(found[0])
    depth = len(held)
    pool.touch(held)
    try:
        path = path[:_room(h, len(path), a.evict_below)]
        if path:
            _load(h, path, depth)
    finally:
        pool.free_blocks(reversed(held))
    mirror.touch_path(ancestors + path)
    return len(path)


def _load(h, path: list, depth: int) -> None:
    host, pool, mirror = h.host, h.pool, h.mirror
    blocks = pool.get_new_blocks(len(path))      # evictions here are demoted in this same step
    try:
        # release what those blocks held from the mirror now, before they are mapped to the
        # loaded nodes: a later flush would otherwise release the new mapping instead of the old
        h.evictions.flush()
        bs = h.block_size
        for i, (blk, node) in enumerate(zip(blocks, path)):
            pool._insert_block_hash(node.key, blk, num_tokens=(depth + i + 1) * bs)
            slot, _ = host.take(node.key)
            host.load(slot, blk.block_id)
            mirror.map_block(blk.block_id, node)
    except BaseException:
        # the blocks go back to vLLM's pool, and without the hashes their KV will never hold:
        # a failure here (the policy's observe, the host tier) must not shrink the pool for good
        pool.evict_blocks({b.block_id for b in blocks})
        pool.free_blocks(blocks)
        raise
    pool.free_blocks(reversed(blocks))
    h.evictions.watch([b.block_id for b in blocks])
    host.stats.prefetched += len(path)
    h._dirty = True


def run(h, so) -> None:
    """The runtime's actions after schedule step `so`, carried out on hosted runtime `h`."""
    view = EngineView(h, so)
    t0 = time.perf_counter()
    try:
        actions = list(h.runtime.act(view.now, view))
    finally:
        h.runtime_time.add(time.perf_counter() - t0)
    for a in actions:
        if type(a) is WarmUp:
            h.counts["warmup_actions"] += 1   # the server's job: the connector cannot send requests
        elif type(a) is Prefetch:
            h.counts["prefetch_actions"] += 1
            if h.host is not None:
                h.counts["prefetched_blocks"] += prefetch(h, a)
            else:
                h.counts["prefetch_ignored"] += 1

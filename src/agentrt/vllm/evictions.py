"""Evictions seen by the hosted runtime (`hosted.py`): which mirrored blocks vLLM handed out again.

Model: vLLM's block pool reuses a free cached block without telling the scheduler's connector.
With vLLM 0.32's reuse watchers (`BlockPool._reuse_watchers`, the hook `unpin_blocks` uses) a
callback fires as a watched block is handed out, before its hash is dropped: it only records the
block id (it runs inside vLLM's allocation). Without watchers the mirror is diffed against the
pool at each flush. A flush releases the blocks from the mirror (`mirror.py`) and tells the
runtime `BlocksEvicted`; with a host tier, blocks evicted by the step that flushes them are
demoted to host slots instead (the copy must reach the worker before the step's forward reuses
the block). vLLM's `reset_prefix_cache` (after a weight update, say) calls the connector only
when asked to (`reset_connector`), but it always replaces the pool's hash map and fires every
watcher: a flush that finds a new map calls the owner's reset (`HostedRuntime.reset`, which
ends in `reset` here) instead of demoting what the reset dropped (its KV may belong to the old
weights).
"""

from __future__ import annotations

from collections.abc import Callable

from agentrt.cache.block import HOST
from agentrt.runtime import events as ev
from agentrt.vllm.hosttier import HostTier
from agentrt.vllm.mirror import Mirror


class MirrorEvictions:
    """Watches the pool's reuse of mirrored blocks and turns it into `BlocksEvicted` events."""

    def __init__(self, mirror: Mirror, host: HostTier | None, counts: dict[str, int],
                 observe: Callable[[ev.Event], None], now: Callable[[], float],
                 on_reset: Callable[[], None]) -> None:
        self.mirror = mirror
        self.host = host             # the owner's host tier; None once it is switched off
        self.counts = counts         # the owner's counts: evicted, demoted, reset_evicted
        self._observe = observe
        self._now = now
        self._on_reset = on_reset
        self.pool = None
        self.watching = False        # the pool has reuse watchers
        self.reused: list[int] = []  # block ids the watchers saw handed out since the last flush
        self._hash_map = None        # the pool's hash map object: vLLM replaces it on a reset

    def bind(self, pool) -> None:
        self.pool = pool
        self._hash_map = getattr(pool, "cached_block_hash_to_block", None)
        self.watching = isinstance(getattr(pool, "_reuse_watchers", None), dict)

    def watch(self, block_ids: list[int]) -> None:
        """Be told when vLLM hands these (mirrored) blocks out again."""
        if self.watching and block_ids:
            w = self.pool._reuse_watchers
            for b in block_ids:
                w.setdefault(b, self._on_reuse)

    def _on_reuse(self, block) -> None:
        # runs inside vLLM's allocation: record only
        self.reused.append(block.block_id)

    def flush(self, demote: bool = True) -> None:
        """Mirror this step's evictions. Only evictions flushed by the step that made them may be
        demoted: the copy must reach the worker before the step's forward reuses the block."""
        m = self.mirror
        hm = getattr(self.pool, "cached_block_hash_to_block", None)
        if hm is not self._hash_map:          # vLLM reset its prefix cache since the last flush
            self._hash_map = hm
            self._on_reset()
            return
        released = []
        if self.watching:
            if not self.reused:
                return
            for bid in self.reused:
                node = m.release_block(bid)
                if node is not None:
                    released.append((node, bid))
            self.reused.clear()
        else:
            blocks = self.pool.blocks
            for bid, node in list(m.by_block.items()):
                if blocks[bid].block_hash != node.key:
                    n = m.release_block(bid)
                    if n is not None:
                        released.append((n, bid))
        if not released:
            return
        if self.host is not None and demote:
            gone = self.host.demote(released, m)
            demoted = [n for n, _ in released if n.tier == HOST]
        else:
            for n, _ in released:
                m.drop(n)
            gone, demoted = [n for n, _ in released], []
        now = self._now()
        if gone:
            self.counts["evicted"] += len(gone)
            self._observe(ev.BlocksEvicted(now, gone, False))
        if demoted:
            self.counts["demoted"] += len(demoted)
            self._observe(ev.BlocksEvicted(now, demoted, True))

    def reset(self) -> None:
        """vLLM reset its prefix cache: the mirror and the host tier are emptied, all evicted."""
        self.reused.clear()
        if self.host is not None:
            self.host.clear()
        gone = self.mirror.clear()
        self.counts["reset_evicted"] += len(gone)
        if gone:
            self._observe(ev.BlocksEvicted(self._now(), gone, False))

    def release(self) -> None:
        """The runtime is off: forget pending reuses and take our watchers off the pool."""
        self.reused.clear()
        try:
            if self.watching:
                w = self.pool._reuse_watchers
                for bid in [b for b, cb in w.items() if cb == self._on_reuse]:
                    del w[bid]
        except Exception:  # noqa: BLE001 - best effort cleanup
            pass

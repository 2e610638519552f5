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
watcher: a flush that finds a new map resets the mirror and the host tier instead of demoting
what the reset dropped (its KV may belong to the old weights). A mixin of `HostedRuntime`: it
reads its `pool`, `mirror`, `host`, `counts`.
"""

from __future__ import annotations

from agentrt.cache.block import HOST
from agentrt.runtime import events as ev


class MirrorEvictions:
    def watch(self, block_ids: list[int]) -> None:
        """Be told when vLLM hands these (mirrored) blocks out again."""
        if self._watch and block_ids:
            w = self.pool._reuse_watchers
            for b in block_ids:
                w.setdefault(b, self._on_reuse)

    def _on_reuse(self, block) -> None:
        # runs inside vLLM's allocation: record only
        self._reused.append(block.block_id)

    def _flush_evictions(self, demote: bool = True) -> None:
        """Mirror this step's evictions. Only evictions flushed by the step that made them may be
        demoted: the copy must reach the worker before the step's forward reuses the block."""
        m = self.mirror
        hm = getattr(self.pool, "cached_block_hash_to_block", None)
        if hm is not self._hash_map:          # vLLM reset its prefix cache since the last flush
            self._hash_map = hm
            self.reset()
            return
        released = []
        if self._watch:
            if not self._reused:
                return
            for bid in self._reused:
                node = m.release_block(bid)
                if node is not None:
                    released.append((node, bid))
            self._reused.clear()
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
        now = self.now()
        if gone:
            self.counts["evicted"] += len(gone)
            self._observe(ev.BlocksEvicted(now, gone, False))
        if demoted:
            self.counts["demoted"] += len(demoted)
            self._observe(ev.BlocksEvicted(now, demoted, True))

    def reset(self) -> None:
        """vLLM reset its prefix cache."""
        self._reused.clear()
        self._plans.clear()
        if self.host is not None:
            self.host.clear()
        gone = self.mirror.clear()
        self.counts["reset_evicted"] += len(gone)
        if gone:
            self._observe(ev.BlocksEvicted(self.now(), gone, False))

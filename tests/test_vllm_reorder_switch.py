"""vLLM's free-queue ordering (`vllm/reorder.py`) when the runtime's LRU safety net switches key
kinds during a deferred re-rank: it re-ranks at once instead of comparing a tuple with an int.
A fake free list with the linked-list surface the orderer reads; no vLLM needed."""

from __future__ import annotations

from types import SimpleNamespace

from agentrt.vllm import reorder
from agentrt.vllm.reorder import QueueOrderer


class FakeQueue:
    def __init__(self, blocks) -> None:
        self.fake_free_list_head = SimpleNamespace(prev_free_block=None, next_free_block=None)
        self.fake_free_list_tail = SimpleNamespace(prev_free_block=None, next_free_block=None)
        self.blocks = []
        self.append_n(blocks)

    def _link(self) -> None:
        prev = self.fake_free_list_head
        for b in self.blocks:
            prev.next_free_block, b.prev_free_block = b, prev
            prev = b
        prev.next_free_block, self.fake_free_list_tail.prev_free_block = self.fake_free_list_tail, prev

    @property
    def num_free_blocks(self) -> int:
        return len(self.blocks)

    def get_all_free_blocks(self):
        return list(self.blocks)

    def remove(self, b) -> None:
        self.blocks.remove(b)
        self._link()

    def append_n(self, bs) -> None:
        self.blocks.extend(bs)
        self._link()


def test_a_deferred_rerank_across_a_key_kind_switch_ranks_at_once(monkeypatch):
    blocks = [SimpleNamespace(block_id=i, block_hash=bytes([i]), ref_cnt=0) for i in range(6)]
    nodes = {i: SimpleNamespace(key=bytes([i]), last_touch=10 - i) for i in range(6)}
    mode = {"lru": False}

    def score(node):
        return node.last_touch if mode["lru"] else (1, -node.last_touch)

    clock = {"t": 0.0}
    q = FakeQueue(blocks[:4])
    o = QueueOrderer(q, score, nodes, clock=lambda: clock["t"])
    o.order(1)
    assert [b.block_id for b in q.blocks] == [0, 1, 2, 3]            # policy keys: newest last
    clock["t"] = 1e-9                   # too soon for another full re-rank: it would be deferred
    monkeypatch.setattr(reorder, "DUTY", 1e-6)
    o._next_full = 1.0
    mode["lru"] = True                  # the net falls back: int keys from now on
    q.append_n(blocks[4:])
    o.order(2)
    assert [b.block_id for b in q.blocks] == [5, 4, 3, 2, 1, 0]      # LRU: oldest touch first
    assert not o.pending

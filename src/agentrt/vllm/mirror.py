"""A mirror of what vLLM's prefix cache holds, as `agentrt.cache.block.Block` nodes policies can score.

Model
- vLLM caches full blocks under chained hashes (`request.block_hashes`; the pool stores the hash
  plus a 4-byte group id). A mirror node stands for one hash; its parent is the previous block of
  the prompt that stored it, so the nodes form the radix tree the simulator's cache has, and the
  runtime can tag a call's whole path with its thread.
- `Block.hash` is the first 8 bytes of vLLM's hash as an int: the same int the runtime sees in a
  call's `hash_ids`, so anchors and profiles agree with the tree.
- Physical blocks map to nodes (`by_block`); vLLM may hold two copies of one hash, so a node
  counts its copies and leaves the tree when the last copy is evicted. `tenant_blocks` counts
  the mapped physical blocks per tenant of their node (the tenant whose request stored the hash
  first): what each tenant holds of the pool in cached blocks, for tenant KV shares.
- Touch clock: a count of block touches. A finishing request touches its path deepest block
  first, the order in which vLLM frees (and so LRU-queues) it: equal policy scores then keep
  stock vLLM's order.
- A node evicted while its children are still cached keeps them: they are orphans until a prompt
  stores the parent's hash again and re-attaches them.
- With a host tier (`hosttier.py`) a node whose last GPU copy is evicted may stay in the tree with
  tier HOST; it becomes GPU again when loaded or recomputed.
Only the scheduler process (one thread) touches the mirror.
"""

from __future__ import annotations

from agentrt.cache.block import GONE, GPU, Block


def hash_int(h) -> int:
    """vLLM block hash (bytes, with or without group id; or an int) -> the int the runtime uses."""
    if isinstance(h, int):
        return h
    return int.from_bytes(bytes(h[:8]), "big")


class MirrorBlock(Block):
    __slots__ = ("key", "copies")

    def __init__(self, key: bytes, parent: "Block", tenant: str) -> None:
        super().__init__(hash_int(key), parent, GPU, tenant)
        self.key = key          # vLLM's block hash (with group id)
        self.copies = 0         # physical vLLM blocks holding it


class Mirror:
    def __init__(self) -> None:
        self.root = Block(-1, None, GPU, "default")
        self.nodes: dict[bytes, MirrorBlock] = {}
        self.by_block: dict[int, MirrorBlock] = {}
        self.tenant_blocks: dict[str, int] = {}
        self.clock = 0
        self.inserted = 0
        self.evicted = 0

    def __len__(self) -> int:
        return len(self.nodes)

    def add_path(self, blocks: list, tenant: str) -> tuple[MirrorBlock | None, list[int]]:
        """Mirror a finished request's blocks (vLLM `KVCacheBlock`s, first block first) up to the
        first one without a hash. Returns (deepest node, ids of physical blocks new to the mirror)."""
        parent: Block = self.root
        node: MirrorBlock | None = None
        fresh: list[int] = []
        path: list[MirrorBlock] = []
        for blk in blocks:
            key = blk.block_hash
            if key is None or blk.is_null:
                break
            node = self.nodes.get(key)
            if node is not None and node.tier != GPU:
                node.tier = GPU                    # recomputed (or loaded) after leaving the GPU
            if node is None:
                node = self.nodes[key] = MirrorBlock(key, parent, tenant)
                parent.children[node.hash] = node
                self.inserted += 1
            elif node.parent is not parent:       # an orphan whose parent came back
                node.parent = parent
                node.depth = parent.depth + 1   # the same place in the chain
                parent.children[node.hash] = node
            bid = blk.block_id
            if self.by_block.get(bid) is not node:
                self.evict_block(bid)             # a block reused without us noticing: its old node
                self._map(bid, node)
                fresh.append(bid)
            path.append(node)
            parent = node
        self.touch_path(path)
        return node, fresh

    def release_block(self, block_id: int) -> MirrorBlock | None:
        """vLLM reused physical block `block_id`: its node if that was the node's last copy (the
        caller then drops it or demotes it to the host tier)."""
        node = self._unmap(block_id)
        if node is None:
            return None
        return node if node.copies <= 0 else None

    def evict_block(self, block_id: int) -> MirrorBlock | None:
        """`release_block`, dropping the node if it left the GPU: the node, or None."""
        node = self.release_block(block_id)
        if node is not None:
            self.drop(node)
        return node

    def _map(self, block_id: int, node: MirrorBlock) -> None:
        self.by_block[block_id] = node
        node.copies += 1
        tb = self.tenant_blocks
        tb[node.tenant] = tb.get(node.tenant, 0) + 1

    def _unmap(self, block_id: int) -> MirrorBlock | None:
        """Forget physical block `block_id`: its node (one copy fewer), or None if unmapped."""
        node = self.by_block.pop(block_id, None)
        if node is None:
            return None
        node.copies -= 1
        tb = self.tenant_blocks
        n = tb[node.tenant] - 1
        if n > 0:
            tb[node.tenant] = n
        else:
            del tb[node.tenant]
        return node

    def drop(self, node: MirrorBlock) -> None:
        """The node left every tier: out of the tree (its cached children become orphans)."""
        if self.nodes.get(node.key) is node:
            del self.nodes[node.key]
        parent = node.parent
        if parent is not None and parent.children.get(node.hash) is node:
            del parent.children[node.hash]
        node.tier = GONE
        self.evicted += 1

    def map_block(self, block_id: int, node: MirrorBlock) -> None:
        """Physical block `block_id` now holds `node` (a prefetch loaded it)."""
        self.evict_block(block_id)                # what it held before, if we had not seen it go
        self._map(block_id, node)
        node.tier = GPU

    def touch_path(self, path: list) -> None:
        """Touch nodes (first block first) deepest first, as a finishing request does."""
        clock = self.clock
        for n in reversed(path):
            clock += 1
            n.last_touch = clock
        self.clock = clock

    def promote(self, node: MirrorBlock) -> None:
        """The node is being loaded back to the GPU (its physical block is mapped at finish)."""
        node.tier = GPU

    def clear(self) -> list[MirrorBlock]:
        """vLLM reset its prefix cache: everything is gone."""
        gone = list(self.nodes.values())
        for n in gone:
            n.tier = GONE
        self.nodes.clear()
        self.by_block.clear()
        self.tenant_blocks.clear()
        self.root.children.clear()
        self.evicted += len(gone)
        return gone

    def lookup(self, hash_ids: list[int]) -> Block | None:
        """Deepest node along `hash_ids` (runtime ints), None if not even the first is cached."""
        node: Block = self.root
        for h in hash_ids:
            nxt = node.children.get(h)
            if nxt is None:
                break
            node = nxt
        return None if node is self.root else node

    def prefix(self, hash_ids: list[int]) -> int:
        """Leading blocks of `hash_ids` cached on the GPU."""
        node: Block = self.root
        n = 0
        for h in hash_ids:
            node = node.children.get(h)
            if node is None or node.tier != GPU:
                break
            n += 1
        return n

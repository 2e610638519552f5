"""One node of the radix KV cache: a fixed-size block of tokens identified by its chained hash id.

A block lives in exactly one tier at a time (exclusive tiers, as a victim cache): `GPU`, `HOST`,
or `GONE` once removed from the tree. `lock_ref` counts the running requests whose prompt path
passes through the block (SGLang-style full-path locking), so an unlocked block never has a
locked descendant and every unlocked GPU block is evictable by repeated leaf eviction.

`meta` belongs to the runtime layer (policies annotate blocks there); the cache never reads it.
"""

from __future__ import annotations

GONE = 0
GPU = 1
HOST = 2

TIER_NAMES = {GONE: "gone", GPU: "gpu", HOST: "host"}


class Block:
    __slots__ = ("hash", "parent", "children", "tier", "lock_ref", "gpu_children",
                 "last_touch", "heap_seq", "host_seq", "tenant", "meta", "depth")

    def __init__(self, hash_id: int, parent: "Block | None", tier: int, tenant: str) -> None:
        self.hash = hash_id
        self.parent = parent
        self.children: dict[int, Block] = {}
        self.tier = tier
        self.lock_ref = 0
        self.gpu_children = 0
        self.last_touch = 0          # value of the cache's touch clock at the last touch
        self.heap_seq = 0            # sequence number of this block's live GPU-heap entry, 0 if none
        self.host_seq = 0            # same for the host heap
        self.tenant = tenant
        self.meta: object = None
        # blocks above this one (0 for a tenant's root); a block's place in its chain never changes
        self.depth = 0 if parent is None else parent.depth + 1

    @property
    def is_root(self) -> bool:
        return self.parent is None

    def path(self) -> list["Block"]:
        """Blocks from the first prompt block down to this one (the root excluded)."""
        out = []
        node: Block | None = self
        while node is not None and node.parent is not None:
            out.append(node)
            node = node.parent
        out.reverse()
        return out

    def __repr__(self) -> str:
        return (f"Block(hash={self.hash}, tier={TIER_NAMES[self.tier]}, depth={self.depth}, "
                f"lock={self.lock_ref}, touch={self.last_touch})")


def gpu_run(node: Block, hash_ids, depth: int, n: int) -> tuple[Block, int]:
    """Follow `hash_ids[depth:n]` down from `node` (a GPU block or a root, `depth` blocks deep)
    while the blocks are on the GPU: (the deepest one reached, its depth)."""
    while depth < n:
        child = node.children.get(hash_ids[depth])
        if child is None or child.tier != GPU:
            break
        node = child
        depth += 1
    return node, depth


def host_run(node: "Block | None") -> int:
    """Blocks in the host tier ending at `node`: `node` and its host ancestors (0 if on the GPU).

    Host blocks are always a suffix of a path (a GPU block's parent is on the GPU), so this is
    what a prefetch of `node`'s path has to load.
    """
    n = 0
    while node is not None and node.tier == HOST:
        n += 1
        node = node.parent
    return n

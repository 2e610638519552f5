"""Block nodes for the gate's scheduler, built from the calls' chained hash ids (a radix tree).

Model
- The server sees no engine blocks, only each prompt's chained hash ids (`blocks.py`: equal ids
  mean equal prefixes, a tenant's chains start from its own seed). A node stands for one id; its
  parent is the node of the id before it, the first block's parent is one shared root. So the
  nodes form the radix tree the simulator's cache has, which is what `sched/contexts.py`
  (`LiveContexts`, the `agent` scheduler's working set of live workflows) walks: a workflow's
  context is its latest prompt's deepest node, shared prefixes are one node.
- Nodes are kept in a `TenantLRU` of `max_nodes` entries keyed by (tenant, id): one tenant's
  prompts drop its own least recently used nodes first, never those of a tenant within its
  share. A dropped node lives on only while a live context (or a deeper node) refers to it; the
  next prompt through that id makes a new node, which the working set may count twice until the
  older context moves on (as `contexts.py` says of a block evicted and computed again).
- Children are not linked (`Block.children` stays empty): nothing here looks a prompt up from
  the root, and a tree that holds its children would keep every node alive.
Nothing reads a clock.
"""

from __future__ import annotations

from agentrt.cache.block import GPU, Block
from agentrt.runtime.tenant_lru import TenantLRU


class PromptTree:
    __slots__ = ("root", "_nodes")

    def __init__(self, max_nodes: int = 1 << 17) -> None:
        self.root = Block(-1, None, GPU, "default")
        self._nodes = TenantLRU(max_nodes)

    def __len__(self) -> int:
        return len(self._nodes)

    def node(self, tenant: str, hash_ids: list[int], depth: int) -> Block:
        """The node of `hash_ids[depth - 1]` (the root for depth 0), with its ancestors, made as
        needed; every node on the path is marked used."""
        nodes = self._nodes
        node = self.root
        for h in hash_ids[:max(0, depth)]:
            key = (tenant, h)
            got = nodes.get(key)
            if got is None:
                got = Block(h, node, GPU, tenant)
                nodes.set(key, got)
            else:
                nodes.touch(key)
            node = got
        return node

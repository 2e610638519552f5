"""The working set of live workflows: how many distinct cached blocks their contexts span.

Each live workflow has a context: the deepest block of its latest call (its prompt once cached,
then its output). The working set is the union of those blocks' paths from the root: what the
live workflows will read again. Shared prefixes (a system prompt every workflow starts with)
count once. The union is kept incrementally with a count per block of the live workflows whose
path passes through it; moving a workflow's context only touches the blocks between the old and
the new context and their common ancestor, so a call that extends its history costs its new
blocks only. Blocks are counted whether or not they are still resident: the set is what the
workflows need, not what the cache holds (an evicted block later computed again is a new
object and may be counted twice until the older context moves on).
"""

from __future__ import annotations


class LiveContexts:
    __slots__ = ("_info", "_node")

    def __init__(self) -> None:
        self._info: dict = {}     # block -> [live workflows through it, depth]
        self._node: dict = {}     # workflow key -> its context block

    def __len__(self) -> int:
        """Distinct blocks in the union of the live contexts."""
        return len(self._info)

    def __contains__(self, key) -> bool:
        return key in self._node

    @property
    def workflows(self) -> int:
        return len(self._node)

    def _depth(self, b) -> int:
        return self._info[b][1] if b is not None else 0

    @staticmethod
    def _up(b):
        """The parent, or None at the tenant's root (roots are not blocks of a context)."""
        p = b.parent
        return p if p is not None and p.parent is not None else None

    def blocks_of(self, key) -> int:
        """Blocks on workflow `key`'s context path (0 for a workflow with none)."""
        b = self._node.get(key)
        return self._info[b][1] if b is not None else 0

    def set(self, key, node) -> None:
        """Move workflow `key`'s context to `node` (a cached block, not a root)."""
        if node is None or node.parent is None:
            return
        old = self._node.get(key)
        if old is node:
            return
        info = self._info
        seg = []
        x = node
        while x is not None and x not in info:
            seg.append(x)
            x = self._up(x)
        d = self._depth(x)
        for b in reversed(seg):
            d += 1
            info[b] = [1, d]
        # below their common ancestor, x's side gains this workflow and the old context's loses it
        a, o = x, old
        while a is not o:
            if self._depth(a) >= self._depth(o):
                info[a][0] += 1
                a = self._up(a)
            else:
                o = self._release(o)
        self._node[key] = node

    def _release(self, b):
        cnt = self._info[b]
        cnt[0] -= 1
        up = self._up(b)
        if cnt[0] == 0:
            del self._info[b]
        return up

    def drop(self, key) -> None:
        """Workflow `key` ended: its context leaves the working set."""
        b = self._node.pop(key, None)
        while b is not None:
            b = self._release(b)

"""Chained block hash ids for prompts assembled from content segments.

A prompt is a list of segments `(content_key, tokens)`: an agent's system prompt, the task, a
message of the history. Two prompts get the same hash id at block i exactly when their first
(i + 1) x block_size tokens are the same content, which is how engines hash prefixes (vLLM chains
each block's hash with its parent's). Ids are dense ints from one `BlockHasher`, so every trace a
hasher writes is consistent with itself; a partial last block gets its own id, which no full
block ever equals.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

Segment = tuple[Hashable, int]


class BlockHasher:
    def __init__(self, block_size: int) -> None:
        if block_size <= 0:
            raise ValueError(f"block_size must be > 0, got {block_size}")
        self.block_size = block_size
        self._ids: dict[tuple, int] = {}
        self._memo: dict[tuple, tuple[tuple, int, tuple]] = {}
        self._keys: dict[Hashable, int] = {}    # content key -> small int: cheaper block keys

    def _id(self, key: tuple) -> int:
        ids = self._ids
        v = ids.get(key)
        if v is None:
            v = ids[key] = len(ids)
        return v

    def _blocks(self, segments: Sequence[Segment]) -> tuple[list[int], int]:
        """Ids of every block (full, then a partial last one) of the concatenated segments."""
        out: list[int] = []
        prev = -1
        pieces: tuple = ()
        fill = 0
        memo = self._memo
        for seg in segments:
            n = seg[1]
            if n <= 0:
                continue
            step = memo.get((prev, pieces, seg))
            if step is None:
                step = memo[(prev, pieces, seg)] = self._advance(prev, pieces, fill, seg)
            added, prev, pieces = step
            out.extend(added)
            fill += n
        fill %= self.block_size
        total = len(out) * self.block_size + fill
        if fill:
            out.append(self._id((prev, pieces, "partial")))
        return out, total

    def _advance(self, prev: int, pieces: tuple, fill: int, seg: Segment) -> tuple[tuple, int, tuple]:
        """Feed one segment after a chain state: (ids of the blocks it completes, new state).

        Agents' prompts grow by extension, so the same (state, segment) steps recur on every call
        of a thread; `_blocks` memoises them, which keeps 100k-token threads cheap to rehash.
        """
        bs = self.block_size
        key, n = seg
        key = self._keys.setdefault(key, len(self._keys))
        fill %= bs
        acc = list(pieces)
        added: list[int] = []
        off = 0
        if fill:                          # first complete the block the chain left open
            off = min(bs - fill, n)
            acc.append((key, 0, off))
            if fill + off < bs:
                return (), prev, tuple(acc)
            prev = self._id((prev, tuple(acc)))
            added.append(prev)
            acc = []
        ids = self._ids
        while n - off >= bs:              # the blocks wholly inside this segment
            k = (prev, key, off)          # flat, all ints: cheap to hash, untracked by the gc
            prev = ids.get(k)
            if prev is None:
                prev = ids[k] = len(ids)
            added.append(prev)
            off += bs
        if off < n:
            acc.append((key, off, n - off))
        return tuple(added), prev, tuple(acc)

    def prompt(self, segments: Sequence[Segment]) -> tuple[list[int], int]:
        """(hash_ids, input_length) of a prompt."""
        return self._blocks(segments)

    def output(self, segments: Sequence[Segment], output: Segment) -> list[int]:
        """Ids of the full blocks that the generated tokens complete, continuing the prompt's chain."""
        n_in = sum(max(0, n) for _, n in segments)
        ids, total = self._blocks(list(segments) + [output])
        return ids[n_in // self.block_size: total // self.block_size]

    @property
    def distinct_blocks(self) -> int:
        return len(self._ids)

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

    def _id(self, key: tuple) -> int:
        ids = self._ids
        v = ids.get(key)
        if v is None:
            v = ids[key] = len(ids)
        return v

    def _blocks(self, segments: Sequence[Segment]) -> tuple[list[int], int]:
        """Ids of every block (full, then a partial last one) of the concatenated segments."""
        bs = self.block_size
        out: list[int] = []
        prev = -1
        pieces: list[tuple] = []
        fill = 0
        for key, n in segments:
            if n <= 0:
                continue
            off = 0
            while off < n:
                take = min(bs - fill, n - off)
                pieces.append((key, off, take))
                off += take
                fill += take
                if fill == bs:
                    prev = self._id((prev, tuple(pieces)))
                    out.append(prev)
                    pieces = []
                    fill = 0
        total = len(out) * bs + fill
        if fill:
            out.append(self._id((prev, tuple(pieces), "partial")))
        return out, total

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

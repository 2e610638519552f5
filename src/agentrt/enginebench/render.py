"""Render a trace call into the token ids a live engine sees, so it sees the trace's prefix sharing.

Model
- Each hash id stands for one trace block; it is rendered as `tokens_per_block` token ids drawn
  from a generator seeded by (seed, tenant, hash id). Hash ids are chained (equal id at position
  i means equal blocks 0..i), so equal id sequences give equal token sequences, and two prompts
  share exactly the tokens of the blocks they share; a different id (or tenant) gives different
  tokens with overwhelming probability.
- `scale` shrinks lengths so that a run fits a small machine: a trace block of B tokens becomes
  max(1, round(B * scale)) tokens; the partial last block and the output length scale alike
  (at least one output token). The engine then caches at its own block size: sharing is kept
  down to the engine's block granularity.
- Token ids avoid the tokenizer's special ids (the first `low` ids).
- A call that would not fit the engine's `max_model_len` is clipped: its output to a quarter of
  it, then its prompt from the end; the clipped count is reported, never hidden.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import numpy as np

from agentrt.trace.schema import Call


@dataclass(slots=True)
class Renderer:
    vocab: int
    trace_block_size: int
    scale: float = 1.0
    seed: int = 0
    low: int = 16
    max_model_len: int | None = None
    clipped: int = 0
    _cache: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.scale <= 0:
            raise ValueError(f"scale must be > 0, got {self.scale}")
        if self.vocab <= self.low + 1:
            raise ValueError(f"vocab {self.vocab} too small")

    @property
    def tokens_per_block(self) -> int:
        return max(1, round(self.trace_block_size * self.scale))

    def block_tokens(self, tenant: str, hash_id: int) -> np.ndarray:
        key = (tenant, hash_id)
        toks = self._cache.get(key)
        if toks is None:
            t = zlib.crc32(tenant.encode())
            rng = np.random.default_rng([self.seed, t, hash_id & 0xFFFFFFFFFFFFFFFF])
            toks = rng.integers(self.low, self.vocab, self.tokens_per_block, dtype=np.int64)
            if len(self._cache) > 200_000:
                self._cache.clear()
            self._cache[key] = toks
        return toks

    def prompt_length(self, c: Call) -> int:
        bs = self.trace_block_size
        n_full = c.input_length // bs
        tail = c.input_length - n_full * bs
        n = n_full * self.tokens_per_block + (round(tail * self.scale) if tail else 0)
        return max(1, n)

    def render(self, c: Call) -> list[int]:
        """The call's prompt as token ids (deterministic)."""
        n = self.prompt_length(c)
        tpb = self.tokens_per_block
        parts = []
        have = 0
        for h in c.hash_ids:
            if have >= n:
                break
            parts.append(self.block_tokens(c.tenant, h))
            have += tpb
        out = np.concatenate(parts)[:n] if parts else np.full(n, self.low, dtype=np.int64)
        if len(out) < n:   # fewer hash ids than the length needs: pad with the call's own tokens
            pad = self.block_tokens(c.tenant, -(zlib.crc32(f"{c.workflow}:{c.call}".encode()) + 1))
            out = np.concatenate([out, np.resize(pad, n - len(out))])
        if self.max_model_len is not None:
            limit = max(1, self.max_model_len - self.output_tokens(c))
            if len(out) > limit:
                out = out[:limit]
                self.clipped += 1
        return out.tolist()

    def output_tokens(self, c: Call) -> int:
        n = max(1, round(c.output_length * self.scale))
        if self.max_model_len is not None:
            n = min(n, max(1, self.max_model_len // 4))
        return n

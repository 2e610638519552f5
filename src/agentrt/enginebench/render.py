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
- Live answers (`record_output`, on unless `live_outputs` is off): a trace's `output_hash_ids`
  name the blocks a call's generated tokens complete, and a later prompt that carries that
  answer lists them after the call's full prompt blocks. Once the call has finished, those ids
  render as the tokens the engine actually generated (the call's rendered prompt followed by its
  answer, cut into blocks at the same positions), as an agent framework appends the answer it
  received; so the engine can hit the answer's KV as it does in the simulator. An output id
  whose block the answer did not fill (a clipped or shorter answer) renders from the generator.
  `output_blocks_live` and `output_blocks_synthetic` count, over rendered prompts, the output
  blocks rendered each way (with live answers off, all are synthetic: never a hit).
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
    live_outputs: bool = True
    clipped: int = 0
    output_blocks_live: int = 0        # output blocks of earlier answers rendered from real tokens
    output_blocks_synthetic: int = 0   # ... rendered from the generator (answer not there)
    _cache: dict = field(default_factory=dict)
    _live: dict = field(default_factory=dict)     # (tenant, output hash id) -> generated block tokens
    _outputs: set = field(default_factory=set)    # (tenant, output hash id) of calls rendered so far

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
        live = self._live.get(key)
        if live is not None:
            return live
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

    def sent_length(self, c: Call) -> int:
        """The prompt tokens `render` sends for `c` (after any clipping)."""
        n = self.prompt_length(c)
        if self.max_model_len is not None:
            n = min(n, max(1, self.max_model_len - self.output_tokens(c)))
        return n

    def render(self, c: Call) -> list[int]:
        """The call's prompt as token ids (deterministic)."""
        n = self.prompt_length(c)
        tpb = self.tokens_per_block
        parts = []
        have = 0
        for h in c.hash_ids:
            if have >= n:
                break
            key = (c.tenant, h)
            if key in self._outputs:
                if key in self._live:
                    self.output_blocks_live += 1
                else:
                    self.output_blocks_synthetic += 1
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
        self._outputs.update((c.tenant, h) for h in c.output_hash_ids)
        return out.tolist()

    def record_output(self, c: Call, prompt: list[int], generated: list[int]) -> int:
        """The call's answer: its output blocks render from `prompt + generated` from now on.
        Returns how many output blocks the answer filled."""
        if not self.live_outputs or not c.output_hash_ids or len(prompt) != self.prompt_length(c):
            return 0                           # nothing to carry, or a clipped prompt: positions moved
        tpb = self.tokens_per_block
        seq = np.asarray(list(prompt) + list(generated), dtype=np.int64)
        first = c.input_length // self.trace_block_size      # the first output block's position
        filled = 0
        for i, h in enumerate(c.output_hash_ids):
            lo = (first + i) * tpb
            if lo + tpb > len(seq):
                break
            self._live[(c.tenant, h)] = seq[lo:lo + tpb]
            filled += 1
        if len(self._live) > 400_000:          # bounded: the oldest answers go first
            for k in list(self._live)[:100_000]:
                del self._live[k]
        return filled

    def output_tokens(self, c: Call) -> int:
        n = max(1, round(c.output_length * self.scale))
        if self.max_model_len is not None:
            n = min(n, max(1, self.max_model_len // 4))
        return n

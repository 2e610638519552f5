"""A trace as a live engine saw it: lengths in the tokens sent, hash ids per engine KV block.

`agentrt bench --engine vllm` renders each trace block as `tokens_per_id` token ids (the trace's
block size times `--scale`) and the engine caches blocks of `engine_block` tokens, so one engine
block covers `engine_block / tokens_per_id` consecutive trace ids. `reblock` writes the same
calls in those terms, so the simulator replays exactly what the engine was sent: each call's
prompt and output lengths as sent (after scaling and any clipping), its hash ids one per engine
block, chained (an engine block's id stands for every trace id up to its end: two prompts share
an engine block exactly when they share all the trace ids it covers and every block before),
and its output ids the engine blocks its answer completes (the trace's `output_hash_ids`
continue its chain where the prompt's full trace blocks end, so a later prompt that carries the
answer lists the same engine ids, chained after the call's own blocks as sent: where the prompt's
partial trace block lies inside a full engine block, a later prompt holds other tokens there and
shares none of the answer's blocks, as on the engine). Tenants never share ids. Assumes `engine_block` is a multiple
of `tokens_per_id`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace

from agentrt.trace.schema import Call, TraceHeader


class EngineBlocks:
    """Interns chained chunks of trace ids as engine block ids (per tenant)."""

    def __init__(self, per_block: int) -> None:
        self.per_block = per_block
        self._ids: dict[tuple, int] = {}

    def ids(self, tenant: str, trace_ids: list[int], tokens: int, tokens_per_id: int,
            engine_block: int, start_block: int = 0, after: int | None = None) -> list[int]:
        """Engine block ids for the first `tokens` tokens of the chain `trace_ids` (one id per
        `tokens_per_id` tokens), from engine block `start_block` on (earlier ones chain only, or,
        given `after`, the block before `start_block` is that engine block id)."""
        n_blocks = -(-tokens // engine_block)
        out: list[int] = []
        prev: object = ("root", tenant) if after is None else after
        for j in range(0 if after is None else start_block, n_blocks):
            lo = j * self.per_block
            full = min((j + 1) * engine_block, tokens)
            hi = -(-full // tokens_per_id)                    # the trace ids these tokens touch
            key = (prev, tuple(trace_ids[lo:hi]), full - j * engine_block)
            bid = self._ids.get(key)
            if bid is None:
                bid = self._ids[key] = len(self._ids)
            prev = bid
            if j >= start_block:
                out.append(bid)
        return out


def reblock(header: TraceHeader, calls: Iterable[Call], tokens_per_id: int, engine_block: int,
            prompt_len: Callable[[Call], int], output_len: Callable[[Call], int]) -> tuple[TraceHeader, list[Call]]:
    """The calls as the engine saw them (module docstring); the header names the engine block."""
    if engine_block % tokens_per_id:
        raise ValueError(f"engine block {engine_block} is not a multiple of {tokens_per_id} tokens per trace id")
    blocks = EngineBlocks(engine_block // tokens_per_id)
    bs = header.block_size
    out = []
    for c in calls:
        n, m = prompt_len(c), output_len(c)
        ids = blocks.ids(c.tenant, c.hash_ids, n, tokens_per_id, engine_block)
        outs: list[int] = []
        if c.output_hash_ids:
            full = c.hash_ids[:c.input_length // bs] + list(c.output_hash_ids)
            done = (n + m) // engine_block                    # engine blocks the answer completes
            first = n // engine_block
            if done > first:
                # the answer's blocks follow this call's own blocks as sent: where the prompt's
                # partial trace block lies inside a full engine block, the chain through the
                # answer's trace ids would name a block this call never had
                outs = blocks.ids(c.tenant, full, done * engine_block, tokens_per_id, engine_block,
                                  start_block=first, after=ids[first - 1] if first else None)
        out.append(replace(c, input_length=n, output_length=m, hash_ids=ids, output_hash_ids=outs))
    head = replace(header, block_size=engine_block,
                   description=f"{header.name or 'trace'} as sent to an engine: {tokens_per_id} tokens per "
                               f"trace block, {engine_block}-token KV blocks")
    return head, out

"""A call inside the engine: its progress through admission, loading, prefill and decode.

`context` counts the tokens in the request's KV: the prompt tokens cached or computed so far, then
one per generated token (the token a step samples counts at once). A running request holds
ceil(context / block_size) GPU blocks, so a decode step at a context that is a multiple of the
block size needs one more block first.

After a preemption the request is planned again (`requeue`): its next admission prefills the prompt
plus the tokens it had generated (`prompt_len`), matching the cache on the prompt's full blocks
followed by the completed output blocks the trace names (`hash_ids`, `n_full`), and its prefill
emits its next output token.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentrt.cache.lease import Lease
    from agentrt.runtime.events import CallInfo
    from agentrt.trace.schema import Call

WAITING, LOADING, PREFILL, DECODE, DONE = range(5)


class Request:
    __slots__ = ("info", "call", "arrival", "lease", "state", "ready_at", "prefill_left",
                 "context", "output_left", "oversize", "hit_tokens", "prompt_len", "hash_ids",
                 "n_full", "out_start", "extra_blocks", "total_blocks", "preemptions", "computed",
                 "ttft_done", "first_token_at", "reached")

    def __init__(self, info: "CallInfo", call: "Call | None", arrival: float) -> None:
        bs = info.block_size
        self.info = info
        self.call = call                 # the trace call (None for a runtime warm-up)
        self.arrival = arrival
        self.lease: Lease | None = None
        self.state = WAITING
        self.ready_at = arrival          # when host->GPU loads of its prefix are done
        self.prefill_left = info.input_length
        self.context = 0                 # tokens in its KV (cached + computed + generated)
        self.output_left = info.output_length
        self.oversize = False
        self.hit_tokens = 0
        self.prompt_len = info.input_length   # tokens its next admission prefills
        self.hash_ids = info.hash_ids    # ids of those tokens' full blocks (the first n_full count)
        self.n_full = info.input_length // bs
        self.out_start = 0               # output ids already part of `hash_ids`
        self.total_blocks = -(-(info.input_length + info.output_length) // bs)
        self.extra_blocks = self._extra(bs)
        self.preemptions = 0
        self.computed = 0                # tokens in its KV when it was last preempted
        self.ttft_done = False
        self.first_token_at = arrival     # set when its first token is out (TPOT from then)
        self.reached = arrival            # when it joined the engine's queue (after its request path)

    def _extra(self, bs: int) -> int:
        """Blocks beyond the full prompt blocks that admission reserves: the partial block and
        the block of the token the prefill emits, where those cross into new blocks."""
        return -(-(self.prompt_len + (self.output_left > 0)) // bs) - self.n_full

    def requeue(self, output_hash_ids: list[int]) -> None:
        """Plan the re-admission after a preemption: prefill the prompt plus the generated tokens."""
        bs = self.info.block_size
        self.computed = self.context
        self.preemptions += 1
        self.lease = None
        self.state = WAITING
        self.context = 0
        self.prompt_len = self.info.input_length + self.info.output_length - self.output_left
        base = self.info.input_length // bs
        k = min(len(output_hash_ids), self.prompt_len // bs - base)
        self.hash_ids = self.info.hash_ids[:base] + output_hash_ids[:k] if k > 0 else self.info.hash_ids
        self.n_full = base + (k if k > 0 else 0)
        self.out_start = k if k > 0 else 0
        self.extra_blocks = self._extra(bs)

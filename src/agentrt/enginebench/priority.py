"""The bench client's scheduler: each replayed call's vLLM `priority`, from the calls it has seen.

Model
- One scheduler instance per run (`agentrt.sched`), fed by the client with what it sees of each
  trace call: its arrival when it is issued, then, when its response ends, its admission with
  the cached prefix vLLM reported (`usage.prompt_tokens_details.cached_tokens`, in whole trace
  blocks) and its finish, and its workflow's end (`agentrt.vllm.priority` says why admission is
  reported at the end, and what a fixed priority cannot carry).
- Units are the trace's: `input_length`, `output_length` and block size are the trace call's, as
  in the simulator, so a scheduler ranks a live call exactly as it would rank it there, apart
  from the cache view.
- The cache view (`cached_blocks`) is the client's estimate: a finished call's full prompt
  blocks count as resident until the engine has computed a KV pool's worth of trace tokens since
  (`serve.view.CacheEstimate`, the estimate `agentrt serve` uses). The engine's own cache is not
  observed at submission.
"""

from __future__ import annotations

import itertools

from agentrt.runtime import events as ev
from agentrt.serve.view import CacheEstimate
from agentrt.trace.schema import Call
from agentrt.vllm.priority import PriorityFeeder


class BenchPriorities:
    def __init__(self, scheduler, trace_block_size: int, tokens_per_block: int,
                 capacity_trace_tokens: int) -> None:
        if trace_block_size <= 0 or tokens_per_block <= 0:
            raise ValueError("block sizes must be > 0")
        self.feeder = PriorityFeeder(scheduler)
        self.block_size = trace_block_size
        self.tokens_per_block = tokens_per_block
        self.cache = CacheEstimate(capacity_trace_tokens)
        self._infos: dict[tuple[str, int], ev.CallInfo] = {}
        self._rid = itertools.count(1)

    def _cached(self, info: ev.CallInfo) -> int:
        return self.cache.gpu_prefix(info.tenant, info.hash_ids[:info.n_full])

    def arrive(self, c: Call, now: float) -> int:
        """The call is issued now: its priority."""
        info = ev.CallInfo(next(self._rid), c.workflow, c.agent, c.tenant, c.call, list(c.hash_ids),
                           c.input_length, c.output_length, self.block_size)
        self._infos[(c.workflow, c.call)] = info
        return self.feeder.arrive(info, now, self._cached)

    def done(self, c: Call, cached_tokens: int, ok: bool, now: float) -> None:
        """The call's response ended with `cached_tokens` engine tokens served from the cache."""
        info = self._infos.pop((c.workflow, c.call), None)
        if info is None:
            return
        hit = min(info.n_full, cached_tokens // self.tokens_per_block) if ok else 0
        self.feeder.done(info, now, hit, info.output_length if ok else 0, admitted=ok)
        if ok:
            self.cache.add_work(max(1, info.input_length - hit * self.block_size) + info.output_length)
            self.cache.record(info.tenant, info.hash_ids[:info.n_full])

    def workflow_ended(self, c: Call, now: float) -> None:
        self.feeder.workflow_ended(c.workflow, c.tenant, now)

    def stats(self) -> dict:
        return self.feeder.stats()

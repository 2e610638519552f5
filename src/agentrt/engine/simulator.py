"""Discrete-event model of one serving replica with a two-tier prefix cache.

Model (vLLM V1 / SGLang style)
- Continuous batching: each iteration runs one decode token for every decoding request and fills
  the rest of a token budget (`max_batch_tokens`) with prefill chunks in admission order
  (chunked prefill); at most `max_running` requests run at once. Waiting requests are admitted
  FCFS; when the head does not fit in GPU memory it waits (no skipping, no preemption).
- Admission locks the prompt's cached prefix and reserves GPU blocks for the rest of the prompt,
  its partial last block and its output. Host-tier hits are loaded over PCIe, a serial link: the
  request starts its prefill when its load is done. Computed prompt blocks enter the cache when
  the prefill completes (the iteration that also emits the first token); output blocks when the
  request finishes.
- Iteration time comes from `CostModel`. Stretches of decode-only iterations are fast-forwarded
  step by step without touching the requests, so cost follows events, not tokens.
- A request that cannot fit in the whole GPU pool is served without the cache (`oversize_calls`).
The replay (`replay.py`) decides when calls arrive; the policy decides eviction order and may
issue actions (`act`) between iterations.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from agentrt.cache.radix import RadixKVCache
from agentrt.engine.actions import RuntimeActions
from agentrt.engine.costs import CostModel
from agentrt.engine.metrics import Metrics
from agentrt.engine.presets import Preset
from agentrt.engine.replay import WorkflowReplay
from agentrt.engine.request import DECODE, DONE, LOADING, PREFILL, Request
from agentrt.runtime import events as ev
from agentrt.runtime.policy import Policy
from agentrt.runtime.runtime import AgentRuntime
from agentrt.trace.schema import Call


@dataclass(slots=True)
class EngineConfig:
    preset: Preset
    block_size: int
    gpu_blocks: int | None = None      # None: what the preset's memory holds beside the weights
    host_blocks: int = 0
    max_batch_tokens: int = 8192
    max_running: int = 256

    def __post_init__(self) -> None:
        if self.block_size <= 0:
            raise ValueError("block_size must be > 0")
        if self.gpu_blocks is None:
            self.gpu_blocks = self.preset.gpu_blocks(self.block_size)
        if self.gpu_blocks <= 0:
            raise ValueError(f"gpu_blocks must be > 0, got {self.gpu_blocks}")
        if self.host_blocks < 0:
            raise ValueError(f"host_blocks must be >= 0, got {self.host_blocks}")

    @property
    def block_bytes(self) -> int:
        return self.preset.model.kv_bytes_per_token * self.block_size


class Simulator(RuntimeActions):
    def __init__(self, config: EngineConfig, policy: Policy | AgentRuntime, calls: Iterator[Call],
                 concurrency: int | None = None, record_stream: bool = False,
                 time_scale: float = 1.0,
                 progress: Callable[[int], None] | None = None) -> None:
        self.config = config
        self.runtime = policy if isinstance(policy, AgentRuntime) else AgentRuntime(policy)
        self.policy = self.runtime.policy
        self.cost = CostModel(config.preset)
        self.cache = RadixKVCache(config.gpu_blocks, config.host_blocks, self.policy, config.block_bytes)
        self.runtime.touch_clock = lambda: self.cache.touch_clock
        self.replay = WorkflowReplay(calls, concurrency, time_scale)
        self.metrics = Metrics()
        self.stream: list | None = [] if record_stream else None
        self.progress = progress
        self.now = 0.0
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self._admit_blocked = False
        self._pcie_free = 0.0
        self._rid = 0
        self._events = self.runtime.wants_events
        self._observe = self.runtime.observe
        self._acts = self.policy.acts
        self._inflight: dict = {}        # prefetched block -> time its PCIe transfer is done
        self._last_decode_only = False   # the latest iteration (or fast-forward stretch) had no prefill
        self._last_iter_s = 0.0
        if self._events:
            self.cache.on_evict = self._on_evict

    # ------------------------------------------------------------------ main loop
    def run(self) -> Metrics:
        t0 = time.perf_counter()
        cost = self.cost
        budget_max = self.config.max_batch_tokens
        replay = self.replay
        while True:
            for t, c in replay.pop_arrivals(self.now):
                self._arrive(t, c)
            if not self.running and not self.waiting:
                t = replay.next_arrival()
                if t is None:
                    break
                self.now = max(self.now, t)
                continue
            if self._acts:
                self._act()
            if self.waiting and not self._admit_blocked:
                self._admit()
            now = self.now
            decode = []
            ctx = 0
            loading_until = None
            for r in self.running:
                if r.state == DECODE:
                    decode.append(r)
                    ctx += r.context
                elif r.state == LOADING:
                    if r.ready_at <= now:
                        r.state = PREFILL
                    elif loading_until is None or r.ready_at < loading_until:
                        loading_until = r.ready_at
            tokens = len(decode)
            pairs = float(ctx)
            kv = float(ctx)
            budget = budget_max - tokens
            chunks = []
            if budget > 0:
                for r in self.running:
                    if r.state == PREFILL:
                        n = r.prefill_left if r.prefill_left < budget else budget
                        chunks.append((r, n))
                        tokens += n
                        pairs += n * (r.context + (n + 1) / 2.0)
                        kv += r.context + n
                        budget -= n
                        if budget <= 0:
                            break
            if tokens == 0:
                nxt = replay.next_arrival()
                cands = [t for t in (nxt, loading_until) if t is not None]
                if not cands:
                    raise RuntimeError("simulator stalled: requests wait but nothing can run")
                self.now = max(now, min(cands))
                continue
            if not chunks and len(decode) > 0:
                k = min(r.output_left for r in decode)
                if k > 1 and self._fast_forward(decode, ctx, k - 1, loading_until):
                    continue
            dur = cost.iteration(tokens, pairs, kv)
            self.now = now + dur
            self._last_decode_only = not chunks
            self._last_iter_s = dur
            for r, n in chunks:
                r.prefill_left -= n
                r.context += n
                if r.prefill_left == 0:
                    self._prefill_done(r)
            for r in decode:
                r.output_left -= 1
                r.context += 1
                if r.output_left == 0:
                    self._finish(r)
            if self.running and any(r.state == DONE for r in self.running):
                self.running = [r for r in self.running if r.state != DONE]
        m = self.metrics
        m.wall_seconds = time.perf_counter() - t0
        m.evictions = self.cache.evictions
        m.h2d_bytes = self.cache.h2d_bytes
        m.d2h_bytes = self.cache.d2h_bytes
        m.late_arrivals = replay.late_arrivals
        return m

    def _fast_forward(self, decode: list[Request], ctx: int, steps_max: int,
                      loading_until: float | None) -> bool:
        """Run up to `steps_max` decode-only iterations that change no request's state."""
        limit = self.replay.next_arrival()
        if loading_until is not None and (limit is None or loading_until < limit):
            limit = loading_until
        if limit is None:
            limit = float("inf")
        t = self.now
        b = len(decode)
        steps = 0
        it = self.cost.iteration
        while steps < steps_max and t < limit:
            t += it(b, ctx, ctx)
            ctx += b
            steps += 1
        if steps == 0:
            return False
        self._last_decode_only = True
        self._last_iter_s = t - self.now
        self.now = t
        for r in decode:
            r.output_left -= steps
            r.context += steps
        return True

    # ------------------------------------------------------------------ request lifecycle
    def _arrive(self, t: float, c: Call) -> None:
        self._rid += 1
        bs = self.config.block_size
        info = ev.CallInfo(rid=self._rid, workflow=c.workflow, agent=c.agent, tenant=c.tenant,
                           index=c.call, hash_ids=c.hash_ids, input_length=c.input_length,
                           output_length=c.output_length, block_size=bs, signal=c.signal,
                           agent_explicit=c.agent is not None)
        total_blocks = -(-(c.input_length + c.output_length) // bs)
        r = Request(info, c, t, total_blocks - c.input_length // bs)
        m = self.metrics
        if m.first_arrival is None or t < m.first_arrival:
            m.first_arrival = t
        self.waiting.append(r)
        if self._events:
            self._observe(ev.CallArrived(self.now, info))

    def _admit(self) -> None:
        cache = self.cache
        bs = self.config.block_size
        now = self.now
        m = self.metrics
        while self.waiting and len(self.running) < self.config.max_running:
            r = self.waiting[0]
            info = r.info
            n_full = info.input_length // bs
            if n_full + r.extra_blocks > cache.gpu_capacity:
                r.oversize = True
                r.state = PREFILL
                lease = None
            else:
                lease = cache.acquire(info.tenant, info.hash_ids, n_full, r.extra_blocks, now)
                if lease is None:
                    self._admit_blocked = True
                    return
            self.waiting.popleft()
            self.running.append(r)
            r.lease = lease
            gpu_tok = host_tok = 0
            if lease is not None:
                cap = info.input_length - 1
                gpu_tok = min(lease.gpu_hit * bs, cap)
                host_tok = min((lease.gpu_hit + lease.host_hit) * bs, cap) - gpu_tok
                if lease.host_hit:
                    start = max(now, self._pcie_free)
                    self._pcie_free = start + self.cost.pcie_seconds(lease.host_hit * self.config.block_bytes)
                    r.ready_at = self._pcie_free
                    r.state = LOADING
                else:
                    r.state = PREFILL
                if self._inflight and lease.gpu_hit:
                    self._wait_for_prefetch(r, lease, now)
                m.block_touches += lease.gpu_hit + lease.host_hit
            r.hit_tokens = gpu_tok + host_tok
            r.context = r.hit_tokens
            r.prefill_left = info.input_length - r.hit_tokens
            if info.warmup:
                m.warmup_calls += 1
                m.warmup_prefill_tokens += r.prefill_left
            else:
                m.prompt_tokens += info.input_length
                m.gpu_hit_tokens += gpu_tok
                m.host_hit_tokens += host_tok
                m.prefill_tokens += r.prefill_left
                if r.oversize:
                    m.oversize_calls += 1
                if self.stream is not None:
                    self.stream.append((info.tenant, info.hash_ids[:n_full], info.input_length, True))
            if self._events and lease is not None:
                self._observe(ev.CallAdmitted(now, info, lease.node, lease.gpu_hit, lease.host_hit))

    def _prefill_done(self, r: Request) -> None:
        now = self.now
        if r.lease is not None:
            inserted = self.cache.commit_prompt(r.lease, now)
            self.metrics.block_touches += inserted
            if self._events:
                self._observe(ev.PromptCached(now, r.info, r.lease.node, inserted))
        if not r.info.warmup:
            self.metrics.ttft.append(now - r.arrival)
        if r.info.output_length > 0:
            r.output_left -= 1
            r.context += 1
        if r.output_left <= 0:
            self._finish(r)
        else:
            r.state = DECODE

    def _finish(self, r: Request) -> None:
        now = self.now
        r.state = DONE
        info = r.info
        m = self.metrics
        node = None
        if r.lease is not None:
            ohids = r.call.output_hash_ids if r.call is not None else []
            m.block_touches += self.cache.release(r.lease, ohids, now)
            node = r.lease.node
            if ohids and self.stream is not None and not info.warmup:
                self.stream.append((info.tenant, ohids, r.lease.n_full, False))
        self._admit_blocked = False
        if info.warmup:
            if self._events:
                self._observe(ev.CallFinished(now, info, node, False))
            return
        m.calls += 1
        m.output_tokens += info.output_length
        if now > m.last_finish:
            m.last_finish = now
        tool_call, ended = self.replay.finish(r.call, now)
        if self._events:
            self._observe(ev.CallFinished(now, info, node, tool_call))
        if ended is not None:
            m.workflows += 1
            m.e2e.append(now - (ended.first_arrival if ended.first_arrival is not None else r.arrival))
            if self._events:
                self._observe(ev.WorkflowEnded(now, info.workflow, info.tenant))
        if self.progress is not None:
            self.progress(1)

    def _on_evict(self, blocks: list, demoted: bool) -> None:
        self._observe(ev.BlocksEvicted(self.now, blocks, demoted))

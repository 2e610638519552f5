"""A request's lifecycle in the simulated engine: arrival, prefill done, finish.

`RequestLifecycle` is the `Simulator`'s part that moves requests through these events, at the
time the simulator passes in; admission is in `admission.py`. With `cache_at="schedule"` a request's
hits may grow before its first prefill chunk (`match_at_schedule`); its counters follow. A
request admitted again after a preemption (`preemption.py`) prefills its prompt plus what it had
generated, and is counted only as recomputation: prompt tokens, hits, the TTFT and the
`admitted` order stay those of the first admission. At the finish, the output
blocks are cached locked on the request's path, the runtime sees `CallFinished` with the deepest
block (so it tags output blocks too), and only then is the path unlocked and scored.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator

from agentrt.cache.radix import RadixKVCache
from agentrt.engine.admission import AdmissionGate
from agentrt.engine.metrics import Metrics
from agentrt.engine.observers import Observers
from agentrt.engine.records import Records
from agentrt.engine.replay import WorkflowReplay
from agentrt.engine.request import DECODE, DONE, Request
from agentrt.engine.tool_hints import RetainHints, ToolHints
from agentrt.runtime import events as ev
from agentrt.runtime.policy import Policy
from agentrt.sched.base import Scheduler
from agentrt.trace.schema import Call


class RequestLifecycle:
    def __init__(self, cache: RadixKVCache, sched: Scheduler, policy: Policy, metrics: Metrics,
                 replay: WorkflowReplay, waiting: deque[Request], gate: AdmissionGate, rids: Iterator[int],
                 records: Records, observers: Observers, block_size: int, tool_hints: ToolHints | None,
                 retain: RetainHints | None, progress: Callable[[int], None] | None) -> None:
        """`replay`: the arrival source told of each finish (`WorkflowReplay` or one with its
        interface); `rids`: request ids, shared with warm-ups (`actions.py`)."""
        self.cache = cache
        self.sched = sched
        self.policy = policy
        self.metrics = metrics
        self.replay = replay
        self.waiting = waiting
        self.gate = gate
        self.rids = rids
        self.records = records
        self.observers = observers
        self.block_size = block_size
        self.tool_hints = tool_hints
        self.retain = retain
        self.progress = progress
        self.reorders = sched.reorders

    def arrive(self, t: float, c: Call, now: float) -> None:
        """A call that arrived at `t` joins the waiting queue at `now` (>= `t`)."""
        bs = self.block_size
        info = ev.CallInfo(rid=next(self.rids), workflow=c.workflow, agent=c.agent, tenant=c.tenant,
                           index=c.call, hash_ids=c.hash_ids, input_length=c.input_length,
                           output_length=c.output_length, block_size=bs, signal=c.signal,
                           agent_explicit=c.agent is not None)
        r = Request(info, c, t)
        r.reached = now
        m = self.metrics
        if m.first_arrival is None or t < m.first_arrival:
            m.first_arrival = t
        if m.last_arrival is None or t > m.last_arrival:
            m.last_arrival = t
        self.waiting.append(r)
        if self.reorders:
            self.gate.blocked = False     # it may rank before the blocked one
        if self.observers.on:
            self.observers.observe(ev.CallArrived(now, info))

    def prefill_done(self, r: Request, now: float) -> None:
        lease = r.lease
        if lease is not None:
            self.metrics.block_touches += self.cache.commit_prompt(lease, now)
            if self.observers.on:
                # every block it computed (with cache_at="schedule" most entered chunk by chunk)
                inserted = lease.depth - lease.gpu_hit - lease.host_hit
                self.observers.observe(ev.PromptCached(now, r.info, lease.node, inserted))
            if self.sched.defers and self.sched.wakes_on_prefill():
                self.gate.blocked = False     # a call held for this prompt may go now
        if not r.ttft_done:
            r.ttft_done = True
            r.first_token_at = now
            if not r.info.warmup:
                self.metrics.ttft.append(now - r.arrival)
                self.metrics.tenant(r.info.tenant).ttft.append(now - r.arrival)
        if r.output_left > 0:
            r.output_left -= 1
            r.context += 1
        if r.output_left <= 0:
            self.finish(r, now)
        else:
            r.state = DECODE

    def match_at_schedule(self, r: Request) -> None:
        """Before a request's first prefill chunk (`cache_at="schedule"`): blocks that entered
        the cache since its admission, chunks other requests have scheduled above all, become
        its hits (`RadixKVCache.extend_match`); its counters move from computed to hit."""
        k = self.cache.extend_match(r.lease)
        if not k:
            return
        lease = r.lease
        hit = min((lease.gpu_hit + lease.host_hit) * self.block_size, r.prompt_len - 1)
        old = r.hit_tokens
        delta = hit - old
        if delta <= 0:
            return
        r.hit_tokens = r.context = hit
        r.prefill_left -= delta
        m = self.metrics
        m.block_touches += k
        info = r.info
        if r.preemptions:
            less = max(0, r.computed - old) - max(0, r.computed - hit)
            if info.warmup:
                m.warmup_prefill_tokens -= less
            else:
                m.recompute_tokens -= less
        elif info.warmup:
            m.warmup_prefill_tokens -= delta
        else:
            m.gpu_hit_tokens += delta
            m.prefill_tokens -= delta
            m.tenant(info.tenant).gpu_hit_tokens += delta

    def finish(self, r: Request, now: float) -> None:
        r.state = DONE
        info = r.info
        m = self.metrics
        if m.call_log is not None and r.call is not None and not info.warmup:
            m.call_log.append({"workflow": r.call.workflow, "call": r.call.call, "sent": r.arrival,
                               "to_engine_s": r.reached - r.arrival, "ttft_s": r.first_token_at - r.arrival,
                               "latency_s": now - r.arrival, "prompt_tokens": info.input_length,
                               "cached_tokens": r.hit_tokens})
        lease = r.lease
        node = None
        if lease is not None:
            ohids = r.call.output_hash_ids if r.call is not None else []
            before = lease.output_blocks
            # cached locked, so that the runtime tags them (CallFinished) before they are scored
            node = self.cache.cache_output(lease, ohids[r.out_start:] if r.out_start else ohids)
            m.block_touches += lease.output_blocks - before
            records = self.records
            if ohids and records.stream is not None and not info.warmup:
                records.stream.append((info.tenant, ohids, info.input_length // info.block_size, False))
            if records.holds is not None and not info.warmup:
                records.holds.append((len(records.stream) - 1, id(r), -1, None, None))
        self.gate.blocked = False
        observers = self.observers
        if info.warmup:
            if observers.on:
                observers.observe(ev.CallFinished(now, info, node, False))
            if lease is not None:
                self.cache.release(lease)
            return
        m.calls += 1
        m.output_tokens += info.output_length
        m.record_tpot(r.first_token_at, now, info.output_length)
        if now > m.last_finish:
            m.last_finish = now
        tool_ms, ended = self.replay.finish(r.call, now)
        if self.retain is not None and tool_ms > 0 and node is not None:
            # the framework's kv.retain for the call's context, for the tool time it announces
            self.policy.retain_path(now, info.tenant, info.workflow, node,
                                    self.retain.duration(info.workflow, info.index, tool_ms * 1e-3),
                                    self.retain.priority)
        if observers.on:
            hints = self.tool_hints
            expected = (hints.estimate(info.workflow, info.index, tool_ms * 1e-3)
                        if hints is not None and tool_ms > 0 else None)
            observers.observe(ev.CallFinished(now, info, node, tool_ms > 0, expected))
        if lease is not None:
            self.cache.release(lease)
        if ended is not None:
            m.workflows += 1
            m.e2e.append(now - (ended.first_arrival if ended.first_arrival is not None else r.arrival))
            if observers.on:
                observers.observe(ev.WorkflowEnded(now, info.workflow, info.tenant))
        if self.progress is not None:
            self.progress(1)

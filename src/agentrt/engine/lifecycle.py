"""A request's lifecycle in the simulated engine: arrival, prefill done, finish.

A mixin of `Simulator`; admission is in `admission.py`. With `cache_at="schedule"` a request's
hits may grow before its first prefill chunk (`_match_at_schedule`); its counters follow. A
request admitted again after a preemption (`preemption.py`) prefills its prompt plus what it had
generated, and is counted only as recomputation: prompt tokens, hits, the TTFT and the
`admitted` order stay those of the first admission. At the finish, the output
blocks are cached locked on the request's path, the runtime sees `CallFinished` with the deepest
block (so it tags output blocks too), and only then is the path unlocked and scored.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentrt.engine.request import DECODE, DONE, Request
from agentrt.runtime import events as ev
from agentrt.trace.schema import Call

if TYPE_CHECKING:
    from agentrt.engine.simulator import Simulator


class RequestLifecycle:
    def _arrive(self: "Simulator", t: float, c: Call) -> None:
        self._rid += 1
        bs = self.config.block_size
        info = ev.CallInfo(rid=self._rid, workflow=c.workflow, agent=c.agent, tenant=c.tenant,
                           index=c.call, hash_ids=c.hash_ids, input_length=c.input_length,
                           output_length=c.output_length, block_size=bs, signal=c.signal,
                           agent_explicit=c.agent is not None)
        r = Request(info, c, t)
        m = self.metrics
        if m.first_arrival is None or t < m.first_arrival:
            m.first_arrival = t
        if m.last_arrival is None or t > m.last_arrival:
            m.last_arrival = t
        self.waiting.append(r)
        if self._reorders:
            self._admit_blocked = False     # it may rank before the blocked one
        if self._events:
            self._observe(ev.CallArrived(self.now, info))

    def _prefill_done(self: "Simulator", r: Request) -> None:
        now = self.now
        lease = r.lease
        if lease is not None:
            self.metrics.block_touches += self.cache.commit_prompt(lease, now)
            if self._events:
                # every block it computed (with cache_at="schedule" most entered chunk by chunk)
                inserted = lease.depth - lease.gpu_hit - lease.host_hit
                self._observe(ev.PromptCached(now, r.info, lease.node, inserted))
            if self.sched.defers and self.sched.wakes_on_prefill():
                self._admit_blocked = False     # a call held for this prompt may go now
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
            self._finish(r)
        else:
            r.state = DECODE

    def _match_at_schedule(self: "Simulator", r: Request) -> None:
        """Before a request's first prefill chunk (`cache_at="schedule"`): blocks that entered
        the cache since its admission, chunks other requests have scheduled above all, become
        its hits (`RadixKVCache.extend_match`); its counters move from computed to hit."""
        k = self.cache.extend_match(r.lease)
        if not k:
            return
        lease = r.lease
        hit = min((lease.gpu_hit + lease.host_hit) * self.config.block_size, r.prompt_len - 1)
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

    def _finish(self: "Simulator", r: Request) -> None:
        now = self.now
        r.state = DONE
        info = r.info
        m = self.metrics
        lease = r.lease
        node = None
        if lease is not None:
            ohids = r.call.output_hash_ids if r.call is not None else []
            before = lease.output_blocks
            # cached locked, so that the runtime tags them (CallFinished) before they are scored
            node = self.cache.cache_output(lease, ohids[r.out_start:] if r.out_start else ohids)
            m.block_touches += lease.output_blocks - before
            if ohids and self.stream is not None and not info.warmup:
                self.stream.append((info.tenant, ohids, info.input_length // info.block_size, False))
            if self.holds is not None and not info.warmup:
                self.holds.append((len(self.stream) - 1, id(r), -1, None, None))
        self._admit_blocked = False
        if info.warmup:
            if self._events:
                self._observe(ev.CallFinished(now, info, node, False))
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
        if self._events:
            hints = self.tool_hints
            expected = (hints.estimate(info.workflow, info.index, tool_ms * 1e-3)
                        if hints is not None and tool_ms > 0 else None)
            self._observe(ev.CallFinished(now, info, node, tool_ms > 0, expected))
        if lease is not None:
            self.cache.release(lease)
        if ended is not None:
            m.workflows += 1
            m.e2e.append(now - (ended.first_arrival if ended.first_arrival is not None else r.arrival))
            if self._events:
                self._observe(ev.WorkflowEnded(now, info.workflow, info.tenant))
        if self.progress is not None:
            self.progress(1)

    def _on_evict(self: "Simulator", blocks: list, demoted: bool) -> None:
        self._observe(ev.BlocksEvicted(self.now, blocks, demoted))

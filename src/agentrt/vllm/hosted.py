"""The agentrt runtime hosted in vLLM's scheduler process: vLLM's request lifecycle in, eviction order out.

What it maps (the simulator, `engine/simulator.py`, is the reference for which events go when):
- a request added to the scheduler -> `CallArrived` (identity from `identity.py`: kv_hints, then
  session_id, then vllm_xargs; the call's `hash_ids` are its block hashes as ints; a kv_hints
  thread and expected tool time go to `CallInfo.extra["thread"]`, `["tool_expected_s"]`);
- its first prefix lookup -> `CallAdmitted` with the local hit;
- `request_finished` -> its cached blocks enter the mirror (`mirror.py`) and are touched,
  `CallFinished` with the deepest one (the runtime tags the path with the call's thread) and the
  kv_hints tool-call flag and announced tool time (`tool_expected_s`), then
  `WorkflowEnded` if the call was its workflow's last;
- a request vLLM preempted (`SchedulerOutput.preempted_req_ids`, read at the step's end) -> the
  blocks it had completed and vLLM still caches enter the mirror tagged with its thread, as the
  simulator keeps a preempted call's blocks (`preemptions.py`); no event: the call is still in
  flight and runs again;
- vLLM reusing a mirrored block -> the node leaves the mirror, `BlocksEvicted` (batched per step).
  Evictions are seen through the block pool's reuse watchers (`BlockPool._reuse_watchers`, the
  hook vLLM's `unpin_blocks` uses), which fire as a block is handed out, before its hash is
  dropped; without them the mirror is diffed against the pool every step.
- Before allocations (a waiting request's lookup) and after every schedule step the free queue
  is put in policy order (`reorder.py`) when the epoch changed or blocks were freed.
- With a host tier (`host_blocks` > 0, `hosttier.py`): evicted blocks are demoted to host slots,
  a lookup reports the host blocks that continue a request's GPU hit as an external hit, and
  `Prefetch` actions load host blocks back (`act.py`); each step's copies go to the worker in
  the step's metadata (`end_step`).
- With `tenant_shares` the policy is wrapped in `TenantShares` (`sched/kvshare.py`) over the
  per-tenant counts of `tenants.py`: a tenant over its share of the pool is evicted first.
- The runtime's LRU safety net (`runtime/safety_net.py`, option `safety_net`) compares the
  policy's hits with a sampled shadow LRU as large as the mirror; vLLM's own LRU order is the
  order of finishes, which the mirror's touches follow, so the fallback is stock vLLM's order.
- Outermost, the retention floor (`runtime/floor.py`, ledger `runtime/retention.py`): the
  standard `kv.retain` / `vllm.set_priority` hints of a request (`stdhints.py`) are applied when
  it finishes successfully, to the blocks it leaves cached, within `retain_budget` of the pool;
  retained blocks sort after all others until their deadline. Under `lru` without shares (stock:
  nothing reordered) the queue is first reordered once a hint has retained something.
- Every scheduler step runs the runtime's silence sweep once `sweep_interval_s` has passed
  (`AgentRuntime.sweep`); the runtime's caps on open workflows (`max_workflows`,
  `max_workflows_per_tenant`) end the oldest idle ones, counted as `workflows_capped`.
Failure: the first exception from the runtime or the policy (or the policy's `stats()`
returning anything but finite numbers under string names) is logged once, the runtime is
switched off for good (its per-request tables and block-pool watchers are released) and vLLM
carries on with its own LRU order. Nothing here raises into vLLM. `fail_after` (a test hook in
the connector's config) raises `InjectedFault` once that many events have been observed, to
exercise this path against a real engine.
`stats()`: cumulative counts (`counts`, kv_hints counts, the reorderer's and the host tier's),
current sizes and the policy's own `Policy.stats()` as `policy_*` keys: what the event log's
"stats" lines and the connector's Prometheus metrics (`prom.py`) read.
Collaborators: `MirrorEvictions` (`evictions.py`) sees vLLM reuse mirrored blocks,
`Preemptions` (`preemptions.py`) keeps preempted requests' blocks. The policy is built by
`policy_setup.py`.
Time (`now`) is seconds of `time.monotonic()` since the connector started.
"""

from __future__ import annotations

import logging
import math
import time

from agentrt.cache.block import GPU
from agentrt.runtime import events as ev
from agentrt.runtime.floor import RetentionFloor
from agentrt.runtime.retention import Retention
from agentrt.runtime.runtime import AgentRuntime
from agentrt.vllm import act, retain
from agentrt.vllm.config import ConnectorConfig
from agentrt.vllm.eventlog import EventLog
from agentrt.vllm.evictions import MirrorEvictions
from agentrt.vllm.hosttier import HostTier, StepPlan
from agentrt.wire.identity import Identity, request_identity
from agentrt.wire.kvhints import HintCounts
from agentrt.vllm.mirror import Mirror, hash_int
from agentrt.vllm.policy_setup import hosted_policy
from agentrt.vllm.preemptions import Preemptions
from agentrt.vllm.reorder import QueueOrderer, Stopwatch
from agentrt.vllm.tenants import with_tenant_shares

log = logging.getLogger("vllm.agentrt")   # under vLLM's logger: its handler and level


class InjectedFault(RuntimeError):
    """Raised on purpose by the `fail_after` test hook."""


class HostedRuntime:
    """The runtime, its policy and vLLM's block pool, joined; see the module docstring."""

    def __init__(self, cfg: ConnectorConfig, block_size: int, elog: EventLog,
                 separate_workers: bool = False) -> None:
        self.cfg = cfg
        self.block_size = block_size
        self.elog = elog
        self.policy = hosted_policy(cfg, separate_workers)
        self.mirror = Mirror()
        self.policy, self.tenants = with_tenant_shares(self.policy, cfg.share_weights(), self.mirror, block_size)
        self.retention = Retention(0, cfg.retain_budget, cfg.retain_max_s, cfg.share_weights())
        self.policy = RetentionFloor(self.policy, self.retention)
        self.runtime = AgentRuntime(self.policy, anchor_tokens=cfg.anchor_tokens,
                                    silent_after_s=cfg.silent_after_s,
                                    max_workflows=cfg.max_workflows,
                                    max_workflows_per_tenant=cfg.max_workflows_per_tenant,
                                    safety_net=cfg.safety_net)
        self.runtime.touch_clock = lambda: self.mirror.clock
        self.runtime.cached_blocks = lambda: len(self.mirror)
        self.reorder = not cfg.stock
        self._reorder_on_retain = cfg.stock and cfg.reorder    # lru: reorder once something is retained
        self.failed = False
        self.pool = None
        self.orderer: QueueOrderer | None = None
        self._dirty = True
        self._last_epoch: object = None
        # full re-ranks wait for the forward window (`during_forward`; set by scheduler.py)
        self.off_path = False
        self._window_short = False   # the last forward pass was shorter than a full re-rank
        # request id -> (its call, its identity, vLLM's request), while in flight
        self._reqs: dict[str, tuple[ev.CallInfo, Identity, object]] = {}
        self._waiting: set[str] = set()
        self._hinted: dict[str, object] = {}  # request id -> its kv_hints, while it carries standard actions
        self._rid = 0
        self._t0 = time.monotonic()
        self._next_sweep = cfg.sweep_interval_s
        self._events = 0
        self.runtime_time = Stopwatch()   # the runtime's observe, act and sweep (not reordering)
        self.hook_time = Stopwatch()      # all of the connector's scheduler-side hooks (connector.py)
        self.steps = 0                    # scheduler steps (build_connector_meta calls)
        self.host = HostTier(cfg.host_blocks, self._score) if cfg.host_blocks > 0 else None
        self._plans: dict[str, tuple[int, list[bytes]]] = {}   # request -> (first block, host keys)
        self.counts = {"arrived": 0, "finished": 0, "evicted": 0, "demoted": 0, "host_hit_blocks": 0,
                       "warmup_requests": 0, "warmup_actions": 0, "prefetch_actions": 0,
                       "prefetched_blocks": 0, "workflows_ended": 0, "workflows_ended_call": 0,
                       "reset_evicted": 0, "prefetch_ignored": 0, "preempted": 0,
                       "preempted_blocks": 0, "resumed": 0, "resumed_hit_tokens": 0}
        self.evictions = MirrorEvictions(self.mirror, self.host, self.counts, self._observe, self.now,
                                         self.reset)
        self.preemptions = Preemptions(self.mirror, self.runtime, self._reqs, self._waiting, self.counts,
                                       elog, self.evictions.watch)
        self.hint_counts = HintCounts()
        self._warned_hints = False

    # ------------------------------------------------------------------ plumbing
    @property
    def idle(self) -> bool:
        """No request in flight (vLLM has none it told the connector of and not finished)."""
        return not self._reqs

    def now(self) -> float:
        return time.monotonic() - self._t0

    def _observe(self, e) -> None:
        self._events += 1
        if self.cfg.fail_after is not None:     # test hook; no message built per event otherwise
            self._injected_fault(f"at event {self._events}")
        t0 = time.perf_counter()
        try:
            self.runtime.observe(e)
        finally:
            self.runtime_time.add(time.perf_counter() - t0)

    def _score(self, node):
        if self.cfg.fail_after is not None:
            self._injected_fault("in score")
        return self.runtime.score(node)

    def bind_pool(self, pool) -> None:
        self.pool = pool
        self.evictions.bind(pool)
        self.orderer = QueueOrderer(pool.free_block_queue, self._score, self.mirror.by_block,
                                    duty=self.cfg.rerank_duty)
        self.tenants.gpu_capacity = pool.num_gpu_blocks
        self.retention.capacity = pool.num_gpu_blocks
        if not pool.enable_caching:
            self.reorder = self._reorder_on_retain = False
        if self.host is not None and not (self.evictions.watching and pool.enable_caching):
            log.warning("agentrt: the host tier needs prefix caching and vLLM 0.32's reuse watchers; off")
            self.host = self.evictions.host = None
        self.elog.write("bind_pool", num_blocks=pool.num_gpu_blocks, caching=pool.enable_caching,
                        watchers=self.evictions.watching, policy=self.cfg.policy, reorder=self.reorder,
                        host_blocks=self.host.capacity if self.host is not None else 0)

    # ------------------------------------------------------------------ request lifecycle
    def arrived(self, request) -> None:
        idt, hints = request_identity(request, self.hint_counts)
        if hints.ignored:
            self._hints_ignored(request.request_id, hints.ignored)
        for reason in hints.refused:
            self.retention.reject(reason)
        if hints.retain is not None or hints.claims:
            self._hinted[request.request_id] = hints
        self._rid += 1
        hashes = [hash_int(h) for h in request.block_hashes]
        wf = self.runtime.workflow(idt.tenant, idt.workflow)
        index = idt.call if idt.call is not None else (
            wf.calls if wf is not None else 0)
        info = ev.CallInfo(rid=self._rid, workflow=idt.workflow, agent=idt.agent, tenant=idt.tenant,
                           index=index, hash_ids=hashes, input_length=request.num_prompt_tokens,
                           output_length=int(request.max_tokens or 0), block_size=self.block_size,
                           warmup=idt.warmup, agent_explicit=idt.agent is not None)
        if idt.thread is not None:
            info.extra["thread"] = idt.thread
        if idt.tool_expected_s is not None:
            info.extra["tool_expected_s"] = idt.tool_expected_s
        self._reqs[request.request_id] = (info, idt, request)
        self._waiting.add(request.request_id)
        self.tenants.track(request, idt.tenant)
        self.counts["warmup_requests" if idt.warmup else "arrived"] += 1
        self._observe(ev.CallArrived(self.now(), info))
        self.elog.write("arrival", request=request.request_id, session_id=request.session_id,
                        workflow=idt.workflow, agent=info.agent, agent_explicit=info.agent_explicit,
                        tenant=idt.tenant, call=index, end=idt.end, explicit=idt.explicit,
                        warmup=idt.warmup, source=idt.source, thread=idt.thread,
                        tool_call=idt.tool_call, hint_actions=hints.actions,
                        prompt_tokens=request.num_prompt_tokens, blocks=len(hashes))

    def _hints_ignored(self, request_id: str, reasons: list[str]) -> None:
        if not self._warned_hints:
            self._warned_hints = True
            log.warning("agentrt: kv_hints actions ignored on request %s (%s); further ones are "
                        "only counted (hints_* in the stats)", request_id, "; ".join(reasons))
        self.elog.write("hints_ignored", request=request_id, reasons=reasons)

    def lookup(self, request, local_tokens: int) -> int:
        """The scheduler looks up a waiting request's prefix; its allocation follows. Returns the
        tokens the host tier can add to the local hit (whole blocks, never the last token)."""
        entry = self._reqs.get(request.request_id)
        if entry is not None:
            info = entry[0]
            first = info.extra.get("admitted") is None
            # on a later lookup (not allocated last time, or resumed after a preemption) the
            # latest hit is what its allocation reuses (the tenant ledger's running count)
            info.extra["admitted"] = local_tokens
            if first:
                n = local_tokens // self.block_size
                node = self.mirror.lookup(info.hash_ids[:n]) or self.mirror.root
                self._observe(ev.CallAdmitted(self.now(), info, node, n, 0))
                self.elog.write("lookup", request=request.request_id, workflow=info.workflow,
                                local_hit_tokens=local_tokens, prompt_tokens=info.input_length)
        self.before_alloc()
        if self.host is None or not len(self.host):
            return 0
        bs = self.block_size
        start = local_tokens // bs
        keys = self.host.continuation(request.block_hashes, start, (request.num_tokens - 1) // bs - start)
        if keys:
            self._plans[request.request_id] = (start, keys)
        else:
            self._plans.pop(request.request_id, None)
        return len(keys) * bs

    def allocated(self, request, blocks=None, num_external_tokens: int = 0) -> None:
        self._waiting.discard(request.request_id)
        self.preemptions.allocated(request.request_id)
        plan = self._plans.pop(request.request_id, None)
        if plan is None or num_external_tokens <= 0 or self.host is None:
            return
        start, keys = plan
        n = num_external_tokens // self.block_size
        ids = blocks.get_block_ids()[0][start:start + n]
        self.counts["host_hit_blocks"] += self.host.load_hit(keys, ids, self.mirror)

    def finished(self, request, block_ids: list[int]) -> None:
        self._waiting.discard(request.request_id)
        entry = self._reqs.pop(request.request_id, None)
        kept = self.preemptions.finished(request.request_id)
        self._plans.pop(request.request_id, None)
        self.tenants.untrack(request.request_id)
        hinted = self._hinted.pop(request.request_id, None)
        self.evictions.flush(demote=False)
        pool = self.pool
        if entry is None or pool is None:
            return
        info, idt, _ = entry
        node, fresh = self.mirror.add_path([pool.blocks[b] for b in block_ids], idt.tenant)
        if node is None and kept is not None and kept.tier == GPU:
            node = kept                      # aborted after a preemption: the path it kept
        self.evictions.watch(fresh)
        if hinted is not None:
            out = retain.apply(self.retention, self.mirror, request, idt, hinted, block_ids,
                               self.block_size, self.now())
            self.elog.write("retain", request=request.request_id, workflow=idt.workflow,
                            tenant=idt.tenant, outcomes=out, retained=len(self.retention))
            if self._reorder_on_retain and self.retention.entries:
                self.reorder, self._reorder_on_retain, self._dirty = True, False, True
        self._dirty = True
        self.counts["finished"] += 1
        now = self.now()
        self._observe(ev.CallFinished(now, info, node, idt.tool_call, idt.tool_expected_s))
        if idt.end and not idt.warmup:
            self.counts["workflows_ended"] += 1
            if not idt.explicit:             # a request that named no workflow was one
                self.counts["workflows_ended_call"] += 1
            self._observe(ev.WorkflowEnded(now, info.workflow, info.tenant))
        self.elog.write("finish", request=request.request_id, workflow=info.workflow,
                        agent=info.agent, blocks=len(block_ids), mirrored=len(self.mirror),
                        end=idt.end, status=str(getattr(request, "status", "")))

    # ------------------------------------------------------------------ ordering and actions
    def before_alloc(self) -> None:
        if not self.reorder or self.orderer is None:
            return
        epoch = self.runtime.epoch
        if not self._dirty and epoch == self._last_epoch and not self.orderer.pending:
            return
        self.orderer.order(epoch, defer_full=self.off_path and not self._window_short)
        self._dirty = False
        self._last_epoch = epoch

    def during_forward(self, forward_s: float | None) -> None:
        """While the worker runs a step's forward pass (hosted in vLLM's scheduler class): a
        pending full re-rank runs now, off the step's critical path, unless the last one took
        longer than the last forward pass (`forward_s`; None: not measured yet), which it would
        then delay: `before_alloc` then re-ranks under its duty cycle, as without the window."""
        o = self.orderer
        if not self.reorder or o is None:
            return
        self._window_short = forward_s is not None and o.last_full_s > forward_s
        if not o.pending or self._window_short:
            return
        o.order(self.runtime.epoch, force=True)
        self._last_epoch = self.runtime.epoch

    def step(self, scheduler_output) -> None:
        """After every schedule step: evictions, the runtime's actions, the queue order."""
        if self.pool is None:
            return
        self.evictions.flush()
        for rid in getattr(scheduler_output, "preempted_req_ids", None) or ():
            if self.preemptions.preempted(rid, self.pool):
                self._dirty = True
        now = self.now()
        self.maybe_sweep(now)
        self.policy.tick(now)                # retention whose deadline passed
        self.tenants.refresh(self._waiting, self._hit_blocks)
        if self.policy.acts:
            act.run(self, scheduler_output)
            self.evictions.flush()           # what prefetches evicted
        self.before_alloc()

    def _hit_blocks(self, request_id: str) -> int:
        hit = self._reqs[request_id][0].extra.get("admitted") if request_id in self._reqs else None
        return hit // self.block_size if hit else 0

    def maybe_sweep(self, now: float) -> int:
        """The runtime's silence sweep, at most once per `sweep_interval_s` (from `step`)."""
        if now < self._next_sweep:
            return 0
        self._next_sweep = now + self.cfg.sweep_interval_s
        t0 = time.perf_counter()
        try:
            return self.runtime.sweep(now)
        finally:
            self.runtime_time.add(time.perf_counter() - t0)

    def end_step(self) -> StepPlan | None:
        """This step's host copies for the worker (also after a failure: committed loads must run)."""
        return self.host.end_step() if self.host is not None else None

    def reset(self) -> None:
        """vLLM reset its prefix cache (also found by a flush: the pool's hash map was replaced)."""
        self._plans.clear()
        self.evictions.reset()

    # ------------------------------------------------------------------ failure
    def _injected_fault(self, where: str) -> None:
        """Raise once `fail_after` events have been observed (callers check it is set: they sit
        on the per-event and per-block paths)."""
        fa = self.cfg.fail_after
        if self._events > fa:
            raise InjectedFault(f"fail_after={fa}: injected failure {where}")

    def fail(self, where: str, exc: BaseException) -> None:
        """Switch the runtime off for good; vLLM keeps its own (LRU) order from here on."""
        if self.failed:
            return
        self.failed = True
        self.reorder = False
        log.exception("agentrt: %s failed (%r); the runtime is off, vLLM continues with LRU",
                      where, exc, exc_info=exc)
        self.elog.write("error", where=where, error=repr(exc), disabled=True)
        # nothing reads these once off: let go of the requests they hold
        self._reqs.clear()
        self.preemptions.clear()
        self._waiting.clear()
        self._plans.clear()
        self.tenants.clear()
        self._hinted.clear()
        self.retention.clear()
        self.evictions.release()

    # ------------------------------------------------------------------ numbers
    def _policy_stats(self) -> dict:
        """The policy's own numbers, as `policy_*` keys; a policy failing here fails nothing else.
        Anything but a finite number under a string key is the policy's bug: it fails as a raise
        would (the stats go into the JSON event log and Prometheus)."""
        try:
            out = {}
            for k, v in self.policy.stats().items():
                if not isinstance(k, str) or not isinstance(v, (int, float)) or not math.isfinite(v):
                    raise TypeError(f"Policy.stats() must map names to finite numbers, got {k!r}: {v!r}")
                out[f"policy_{k}"] = v
            return out
        except Exception as exc:  # noqa: BLE001 - metrics must not take the engine down
            self.fail("policy.stats", exc)
            return {}

    def change_marker(self) -> tuple:
        """Moves whenever a figure of `stats()` other than the timing and step counts may have:
        every runtime event, count, reorder, host-tier copy and failure (cheap: once per step).
        kv_hints counts move only with an arrival, which the counts cover; the policy's own
        figures only with events and reorders."""
        host = self.host.stats if self.host is not None else None
        return (self._events, sum(self.counts.values()), len(self.mirror), self.failed, self.retention.changes,
                self.orderer.stats.runs if self.orderer is not None else 0,
                (host.saved, host.loaded, host.dropped, host.skipped) if host is not None else None)

    def stats(self) -> dict:
        own = self._policy_stats() if not self.failed else {}
        out = dict(self.counts, mirrored=len(self.mirror), failed=self.failed,
                   policy=self.cfg.policy, reorder=self.reorder, events=self._events,
                   live_workflows=len(self.runtime.workflows),
                   workflows_capped=self.runtime.forced_ends,
                   workflows_silenced=self.runtime.silent_ends, runtime_s=round(self.runtime_time.seconds, 4),
                   runtime_max_s=round(self.runtime_time.max_seconds, 5),
                   hook_s=round(self.hook_time.seconds, 4), hook_max_s=round(self.hook_time.max_seconds, 5),
                   steps=self.steps, **self.hint_counts.as_dict(), **own)
        if self.runtime.net is not None:
            out.update(self.runtime.net.stats())
        if self.orderer is not None:
            st = self.orderer.stats
            out.update(reorders=st.runs, relinks=st.relinks, moved=st.moved, scored=st.scored,
                       reorders_deferred=st.deferred,
                       reorder_s=round(st.time.seconds, 4), reorder_max_s=round(st.time.max_seconds, 5))
        if self.host is not None:
            out.update(host_resident=len(self.host), host_saved=self.host.stats.saved,
                       host_loaded=self.host.stats.loaded, host_dropped=self.host.stats.dropped,
                       host_skipped=self.host.stats.skipped)
        return out

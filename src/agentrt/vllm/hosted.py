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
Failure: the first exception from the runtime or the policy is logged once, the runtime is
switched off (its per-request tables are cleared) and vLLM carries on with its own LRU order.
Nothing here raises into vLLM.
Evictions are tracked by `evictions.py`, preemptions by `preemptions.py`, the numbers (`stats()`)
by `runtime_stats.py`, failure by `failsafe.py`: mixins. The policy is built by `policy_setup.py`.
Time (`now`) is seconds of `time.monotonic()` since the connector started.
"""

from __future__ import annotations

import logging
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
from agentrt.vllm.failsafe import FailSafe
from agentrt.vllm.hosttier import HostTier, StepPlan
from agentrt.wire.identity import Identity, request_identity
from agentrt.wire.kvhints import HintCounts
from agentrt.vllm.mirror import Mirror, hash_int
from agentrt.vllm.policy_setup import hosted_policy
from agentrt.vllm.preemptions import Preemptions
from agentrt.vllm.reorder import QueueOrderer, Stopwatch
from agentrt.vllm.runtime_stats import RuntimeStats
from agentrt.vllm.tenants import with_tenant_shares

log = logging.getLogger("vllm.agentrt")   # under vLLM's logger: its handler and level


class HostedRuntime(FailSafe, MirrorEvictions, Preemptions, RuntimeStats):
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
        self._hash_map = None              # the pool's hash map object: vLLM replaces it on a reset
        self.orderer: QueueOrderer | None = None
        self._watch = False
        self._reused: list[int] = []
        self._dirty = True
        self._last_epoch: object = None
        # request id -> (its call, its identity, vLLM's request), while in flight
        self._reqs: dict[str, tuple[ev.CallInfo, Identity, object]] = {}
        self._resuming: set[str] = set()      # preempted, not yet allocated again
        self._preempted_at: dict = {}         # request id -> deepest node it kept when preempted
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
        self.hint_counts = HintCounts()
        self._warned_hints = False

    # ------------------------------------------------------------------ plumbing
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
        self._hash_map = getattr(pool, "cached_block_hash_to_block", None)   # replaced by a reset
        self._watch = isinstance(getattr(pool, "_reuse_watchers", None), dict)
        self.orderer = QueueOrderer(pool.free_block_queue, self._score, self.mirror.by_block)
        self.tenants.gpu_capacity = pool.num_gpu_blocks
        self.retention.capacity = pool.num_gpu_blocks
        if not pool.enable_caching:
            self.reorder = self._reorder_on_retain = False
        if self.host is not None and not (self._watch and pool.enable_caching):
            log.warning("agentrt: the host tier needs prefix caching and vLLM 0.32's reuse watchers; off")
            self.host = None
        self.elog.write("bind_pool", num_blocks=pool.num_gpu_blocks, caching=pool.enable_caching,
                        watchers=self._watch, policy=self.cfg.policy, reorder=self.reorder,
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
        if request.request_id in self._resuming:
            self._resumed(request.request_id)
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
        self._resuming.discard(request.request_id)
        kept = self._preempted_at.pop(request.request_id, None)
        self._plans.pop(request.request_id, None)
        self.tenants.untrack(request.request_id)
        hinted = self._hinted.pop(request.request_id, None)
        self._flush_evictions(demote=False)
        pool = self.pool
        if entry is None or pool is None:
            return
        info, idt, _ = entry
        node, fresh = self.mirror.add_path([pool.blocks[b] for b in block_ids], idt.tenant)
        if node is None and kept is not None and kept.tier == GPU:
            node = kept                      # aborted after a preemption: the path it kept
        self.watch(fresh)
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
        self.orderer.order(epoch)
        self._dirty = False
        self._last_epoch = epoch

    def step(self, scheduler_output) -> None:
        """After every schedule step: evictions, the runtime's actions, the queue order."""
        if self.pool is None:
            return
        self._flush_evictions()
        for rid in getattr(scheduler_output, "preempted_req_ids", None) or ():
            self.preempted(rid)
        now = self.now()
        self.maybe_sweep(now)
        self.policy.tick(now)                # retention whose deadline passed
        self.tenants.refresh(self._waiting, self._hit_blocks)
        if self.policy.acts:
            act.run(self, scheduler_output)
            self._flush_evictions()          # what prefetches evicted
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

"""Discrete-event model of one serving replica with a two-tier prefix cache.

Model (vLLM V1 / SGLang style)
- Continuous batching: each iteration runs one decode token for every decoding request and fills
  the rest of a token budget (`max_batch_tokens`) with prefill chunks in admission order
  (chunked prefill; a scheduler that `shapes_batch` orders those chunks instead); at most
  `max_running` requests run at once. Waiting requests are admitted
  in the scheduler's order (`admission.py`; default FCFS: when the head does not fit in GPU
  memory it waits, no skipping).
- Admission locks the prompt's cached prefix and reserves GPU blocks for the rest of the prompt,
  its partial last block and the first output token (all prompt blocks at once, not per chunk).
  Host-tier hits are loaded over PCIe, a serial link: the request starts its prefill when its
  load is done. Computed prompt blocks enter the cache when the prefill completes (the iteration
  that also emits the first token; SGLang), or with `cache_at="schedule"` as each chunk is
  scheduled, and a request looks the cache up again before its first chunk (vLLM V1; so calls
  admitted together share a prefix neither has computed yet: `cache/radix.py`).
- Output blocks are allocated as decoding crosses block boundaries, evicting cache if none is
  free and else preempting the most recently admitted request, or under a reordering scheduler
  the lowest-ranked one, as vLLM's priority scheduling does (recompute; `preemption.py`).
  Running requests get their blocks before waiting ones are admitted, and none is admitted in an
  iteration that preempted. Completed output blocks enter the cache when the request finishes,
  locked on its path until the runtime has tagged them.
- Iteration time comes from `CostModel`. Stretches of decode-only iterations are fast-forwarded
  step by step without touching the requests, so cost follows events, not tokens; a stretch
  takes the blocks it crosses into at its start and ends before any step that would preempt.
- A request that cannot fit in the whole GPU pool (prompt and output) is served without the
  cache (`oversize_calls`).
- A measured engine whose processes share the host's cores (`host_per_call_s`, from `agentrt
  calibrate`) does not step while the host handles a call: when a call reaches the engine, for
  the call's own request path (`request_overhead_s`: its HTTP and API-server handling, CPU on
  the cores the engine shares), and when it finishes, for half the measured per-call cost;
  queued one after another on the host; the next iteration starts when the host is done (its
  wall time includes the wait; `busy_s` does not). A burst of calls so holds the engine for
  each call's intake, as the API server takes them in on the engine core's core.
`Simulator` runs the loop and owns the clock, the waiting and running requests and the cache;
it hands the rest to parts it owns, each given what it reads and the time: `admission`
(`admission.py`), `lifecycle` (arrival, prefill completion, finish: `lifecycle.py`), `batch` (an
iteration's prefill chunks: `batch.py`), `actions` (runtime actions: `actions.py`), `preemption`
(block growth and preemption: `preemption.py`), `fast_forward` (decode stretches:
`fast_forward.py`). They share the `AdmissionGate`, the `Records` (`records.py`), the
`Observers` (`observers.py`) and the PCIe `Link` (`links.py`).
The replay (`replay.py`) decides when calls arrive; the policy decides eviction order and may
issue actions (`act`) between iterations. `run` loops over `step` (one iteration, or a report that
the replica is idle or parked until a known time); a cluster (`agentrt.cluster`) steps several
simulators in time order instead, feeding each the calls its router sends (`arrivals`).
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from agentrt.cache.radix import RadixKVCache
from agentrt.engine.actions import RuntimeActions
from agentrt.engine.admission import Admission, AdmissionGate, CacheQueueView, PeerLookup
from agentrt.engine.batch import ChunkPlan, PrefillBatch
from agentrt.engine.costs import CostModel
from agentrt.engine.fast_forward import FastForward
from agentrt.engine.lifecycle import RequestLifecycle
from agentrt.engine.links import Link
from agentrt.engine.metrics import Metrics
from agentrt.engine.observers import Observers
from agentrt.engine.preemption import Preemption
from agentrt.engine.presets import Preset
from agentrt.engine.records import Records
from agentrt.engine.replay import DelayedArrivals, WorkflowReplay
from agentrt.engine.request import DECODE, DONE, LOADING, PREFILL, WAITING, Request
from agentrt.engine.tool_hints import RetainHints, ToolHints
from agentrt.runtime import events as ev
from agentrt.runtime.floor import RetentionFloor
from agentrt.runtime.policy import Policy
from agentrt.runtime.retention import Retention
from agentrt.runtime.runtime import AgentRuntime
from agentrt.sched.base import Scheduler
from agentrt.sched.kvshare import TenantShares
from agentrt.trace.schema import Call

RAN, IDLE, PARKED, BLOCKED = range(4)     # what one `Simulator.step` did
# when a computed prompt block can be hit by another request: after the prefill that computes it
# (SGLang's radix cache) or as soon as it is scheduled (vLLM V1; `cache/radix.py`)
CACHE_AT = ("prefill", "schedule")


@dataclass(slots=True)
class EngineConfig:
    preset: Preset
    block_size: int
    gpu_blocks: int | None = None      # None: what the preset's memory holds beside the weights
    host_blocks: int = 0
    max_batch_tokens: int = 8192
    max_running: int = 256
    cache_at: str = "prefill"          # when computed prompt blocks become hits: CACHE_AT
    request_overhead_s: float = 0.0    # issue -> engine: an API server's path (a measured engine's)
    request_overhead_per_stream_s: float = 0.0   # ... plus this per call in flight (DelayedArrivals)
    host_per_call_s: float = 0.0       # host CPU per call the engine waits for (a measured engine's; see step)

    def __post_init__(self) -> None:
        if self.cache_at not in CACHE_AT:
            raise ValueError(f"cache_at must be one of {', '.join(CACHE_AT)}, got {self.cache_at!r}")
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


class Simulator:
    def __init__(self, config: EngineConfig, policy: Policy | AgentRuntime, calls: Iterator[Call],
                 concurrency: int | None = None, record_stream: bool = False,
                 time_scale: float = 1.0,
                 progress: Callable[[int], None] | None = None,
                 scheduler: Scheduler | None = None, arrivals: WorkflowReplay | None = None,
                 tool_hints: ToolHints | None = None, retain: RetainHints | None = None,
                 safety_net=True, record_calls: bool = False) -> None:
        """`arrivals` replaces the replay of `calls` (then ignored) with another source of the same
        interface (`pop_arrivals`, `next_arrival`, `finish`, `late_arrivals`): a cluster's feed.
        `tool_hints`: the framework announces each tool wait's expected duration (`tool_hints.py`);
        None: it announces none (only that the call ended in a tool call). `retain`: the framework
        sends kv.retain for a call's context when it ends in a tool call (`RetainHints`): the
        policy is wrapped in the retention floor (`runtime/floor.py`), as vLLM's connector does.
        `safety_net`: the runtime's LRU safety net (True, False or a `NetConfig`; ignored when
        `policy` is a runtime already built). `record_calls`: `metrics.call_log` keeps each user
        call's issue time, request path, TTFT and latency (`enginebench/call_path.py` compares
        them with a live run's)."""
        self.config = config
        self.sched = scheduler if scheduler is not None else Scheduler()
        if getattr(self.sched, "kv_shares", False) and not isinstance(policy, AgentRuntime):
            policy = TenantShares(policy, getattr(self.sched, "weights", None))
        if retain is not None and not isinstance(policy, AgentRuntime):
            policy = RetentionFloor(policy, Retention(config.gpu_blocks, retain.budget))
        self.runtime = policy if isinstance(policy, AgentRuntime) else AgentRuntime(policy, safety_net=safety_net)
        self.policy = self.runtime.policy
        self.cost = CostModel(config.preset)
        # the cache ranks through the runtime's `ranker`: the policy, or the LRU safety net around it
        self.cache = RadixKVCache(config.gpu_blocks, config.host_blocks, self.runtime.ranker, config.block_bytes)
        self.runtime.touch_clock = lambda: self.cache.touch_clock
        self.runtime.cached_blocks = lambda: self.cache.gpu_used
        shares = self.policy.inner if isinstance(self.policy, RetentionFloor) else self.policy
        if isinstance(shares, TenantShares):
            shares.attach(self.cache)
        self._shapes = self.sched.shapes_batch
        self._at_schedule = config.cache_at == "schedule"
        if self._at_schedule:
            self.sched.engine_caches_at_schedule()
        self.replay = arrivals if arrivals is not None else WorkflowReplay(calls, concurrency, time_scale)
        if (config.request_overhead_s > 0 or config.request_overhead_per_stream_s > 0) and arrivals is None:
            self.replay = DelayedArrivals(self.replay, config.request_overhead_s, config.request_overhead_per_stream_s)
        self.metrics = Metrics(call_log=[] if record_calls else None)
        self.records = Records(stream=[], holds=[], admitted=[]) if record_stream else Records()
        self.now = 0.0
        # both lists are changed in place only: the parts below and the queue view hold them
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.gate = AdmissionGate()
        self.observers = Observers(self.runtime, self.sched)
        self._acts = self.policy.acts
        self._last_decode_only = False   # the latest iteration (or fast-forward stretch) had no prefill
        self._last_iter_s = 0.0
        self._park_until = 0.0
        self.busy_s = 0.0                # simulated seconds spent in iterations
        self._host_half = config.host_per_call_s / 2.0
        # on a shared host a call's request path is CPU the engine waits for as the call arrives
        self._host_arrive = config.request_overhead_s if self._host_half else 0.0
        self._host_free_at = 0.0         # when the host is done with the calls' handling so far
        # a time before which no outside event can reach this replica (None: only its arrivals);
        # a cluster sets it so that a decode stretch stops where another replica may route a call
        self.horizon: float | None = None

        cache, sched, m, bs = self.cache, self.sched, self.metrics, config.block_size
        rids = itertools.count(1)        # request ids, arrivals and warm-ups alike
        pcie = Link()
        view = (CacheQueueView(cache, self.cost, self.running, self.waiting)
                if sched.reorders or sched.defers else None)
        self.actions = RuntimeActions(self.runtime, cache, self.cost, m, self.waiting, pcie, rids,
                                      self.observers, bs, config.block_bytes, config.host_blocks)
        self.lifecycle = RequestLifecycle(cache, sched, self.policy, m, self.replay, self.waiting, self.gate,
                                          rids, self.records, self.observers, bs, tool_hints, retain,
                                          progress)
        self.batch = PrefillBatch(cache, sched, m, self.running, self.lifecycle.match_at_schedule, bs,
                                  self._shapes, self._at_schedule)
        self.admission = Admission(cache, sched, self.cost, m, self.waiting, self.running, self.gate, view,
                                   pcie, self.actions.inflight, self.batch.plan_chunk, self.records,
                                   self.observers, bs, config.block_bytes, config.max_running)
        self.preemption = Preemption(cache, sched, self.runtime, m, self.waiting, self.running, self.gate,
                                     view, self.actions.inflight, self.records, bs)
        self.fast_forward = FastForward(cache, self.cost, bs)
        if self.runtime.wants_events:
            cache.on_evict = self._on_evict

    # ------------------------------------------------------------------ what others read and set
    @property
    def next_event_time(self) -> float:
        """After `step` returned PARKED: the time it is parked until (the earliest arrival, end
        of a host load or held call's bound)."""
        return self._park_until

    @property
    def has_observers(self) -> bool:
        """Whether the runtime or the scheduler takes events (none are built otherwise)."""
        return self.observers.on

    def observe(self, event) -> None:
        """Deliver an event from outside (a cluster's `WorkflowEnded`) to the runtime and scheduler."""
        self.observers.observe(event)

    def _on_evict(self, blocks: list, demoted: bool) -> None:
        self.observers.observe(ev.BlocksEvicted(self.now, blocks, demoted))

    @property
    def stream(self) -> list | None:
        """Block references in order (`records.py`); None unless `record_stream`."""
        return self.records.stream

    @stream.setter
    def stream(self, value: list | None) -> None:
        self.records.stream = value

    @property
    def holds(self) -> list | None:
        """When user calls held their prompt blocks (`records.py`); None unless `record_stream`."""
        return self.records.holds

    @holds.setter
    def holds(self, value: list | None) -> None:
        self.records.holds = value

    @property
    def admitted(self) -> list[tuple[str, int]] | None:
        """(workflow, call index) of user calls in admission order; None unless `record_stream`."""
        return self.records.admitted

    @admitted.setter
    def admitted(self, value: list[tuple[str, int]] | None) -> None:
        self.records.admitted = value

    @property
    def peers(self) -> PeerLookup | None:
        """Peer transfer (a cluster sets it): peers(tenant, hash_ids, start, n_full) -> blocks
        after `start` that another replica holds on its GPU, received at `net_bytes_s`."""
        return self.admission.peers

    @peers.setter
    def peers(self, value: PeerLookup | None) -> None:
        self.admission.peers = value

    @property
    def net_bytes_s(self) -> float:
        return self.admission.net_bytes_s

    @net_bytes_s.setter
    def net_bytes_s(self, value: float) -> None:
        self.admission.net_bytes_s = value

    # ------------------------------------------------------------------ main loop
    def run(self) -> Metrics:
        t0 = time.perf_counter()
        replay = self.replay
        step = self.step
        while True:
            st = step()
            if st == IDLE:
                t = replay.next_arrival()
                if t is None:
                    break
                self.now = max(self.now, t)
            elif st == PARKED:
                self.now = max(self.now, self._park_until)
            elif st == BLOCKED:
                raise RuntimeError("simulator stalled: requests wait but nothing can run")
        return self.finalize(time.perf_counter() - t0)

    def finalize(self, wall_seconds: float) -> Metrics:
        """Copy the cache's and the replay's counters into the metrics, after the last step."""
        m = self.metrics
        m.wall_seconds = wall_seconds
        m.evictions = self.cache.evictions
        m.h2d_bytes = self.cache.h2d_bytes
        m.d2h_bytes = self.cache.d2h_bytes
        m.late_arrivals = self.replay.late_arrivals
        return m

    def step(self) -> int:
        """Take the calls that arrived by `now`, then run one iteration (or a fast-forwarded
        decode stretch) and return RAN; or return IDLE (nothing running or waiting), PARKED
        (nothing can run before `next_event_time`: an arrival, a host load, a held call's bound)
        or BLOCKED (requests wait and nothing known will let them run). `run` loops over it; a
        cluster (`agentrt.cluster`) steps its replicas in time order and feeds their arrivals."""
        now = self.now
        lifecycle = self.lifecycle
        arrived = self.replay.pop_arrivals(now)
        for t, c in arrived:
            lifecycle.arrive(t, c, now)
        if self._host_arrive and arrived:
            self._host_free_at = max(self._host_free_at, now) + self._host_arrive * len(arrived)
        running = self.running
        if not running and not self.waiting:
            return IDLE
        gate = self.gate
        if gate.wake_at is not None and now >= gate.wake_at:
            gate.wake_at = None
            gate.blocked = False
        if self._acts:
            self.actions.act(now, self._last_decode_only, self._last_iter_s)
        bs = self.config.block_size
        decode = []
        ctx = 0
        loading_until = None
        needy = None
        for r in running:
            st = r.state
            if st == DECODE:
                if not r.context % bs and r.lease is not None:   # its next token opens a block
                    if needy is None:
                        needy = [(r.lease, 1)]
                    else:
                        needy.append((r.lease, 1))
                decode.append(r)
                ctx += r.context
            elif st == LOADING:
                if r.ready_at <= now:
                    r.state = PREFILL
                elif loading_until is None or r.ready_at < loading_until:
                    loading_until = r.ready_at
        preemption = self.preemption
        if needy is not None and not self.cache.grow_all(needy, len(needy)):
            preemption.take_blocks(decode, now)
            decode = [r for r in decode if r.state == DECODE]
            ctx = sum(r.context for r in decode)
        preempted = preemption.preempted
        plan = ChunkPlan(len(decode), float(ctx), float(ctx), self.config.max_batch_tokens - len(decode),
                         self._shapes)
        at_schedule = self._at_schedule
        batch = self.batch
        if at_schedule:       # vLLM's order: running requests' chunks, then admissions
            batch.plan_prefills(plan, now)
        if preempted:
            preemption.preempted = False
            running[:] = [r for r in running if r.state != WAITING]
        elif self.waiting and not gate.blocked:
            n0 = len(running)
            self.admission.admit(now, plan if at_schedule else None)
            for r in running[n0:]:
                if r.state == LOADING and (loading_until is None or r.ready_at < loading_until):
                    loading_until = r.ready_at
        if not at_schedule:
            batch.plan_prefills(plan, now)
        chunks, tokens, pairs, kv = plan.chunks, plan.tokens, plan.pairs, plan.kv
        if tokens == 0:
            if preempted:
                return RAN           # admit in the next iteration
            nxt = self.replay.next_arrival()
            cands = [t for t in (nxt, loading_until, gate.wake_at) if t is not None]
            if not cands:
                return BLOCKED
            self._park_until = min(cands)
            return PARKED
        if not chunks and len(decode) > 0:
            k = min(r.output_left for r in decode)
            if k > 1:
                # the stretch stops at the first outside event: an arrival, another replica's
                # turn (`horizon`), a host or peer load's end, a held call's release
                limit = self.replay.next_arrival()
                for t in (self.horizon, loading_until, gate.wake_at):
                    if t is not None and (limit is None or t < limit):
                        limit = t
                start = now + self._host_wait(now)
                end = self.fast_forward.run(decode, ctx, k - 1, start, float("inf") if limit is None else limit)
                if end is not None:
                    self._last_decode_only = True
                    self._last_iter_s = end - start
                    self.busy_s += end - start
                    self.now = end
                    return RAN
        dur = self.cost.iteration(tokens, pairs, kv, plan.prefill_context)
        self.busy_s += dur
        end = now + self._host_wait(now) + dur
        self.now = end
        self._last_decode_only = not chunks
        self._last_iter_s = dur
        for r, n in chunks:
            r.prefill_left -= n
            r.context += n
            if r.prefill_left == 0:
                lifecycle.prefill_done(r, end)
        for r in decode:
            r.output_left -= 1
            r.context += 1
            if r.output_left == 0:
                lifecycle.finish(r, end)
        if running and any(r.state == DONE for r in running):
            if self._host_half:
                done = sum(1 for r in running if r.state == DONE and not r.info.warmup)
                self._host_free_at = max(self._host_free_at, end) + self._host_half * done
            running[:] = [r for r in running if r.state != DONE]
        return RAN

    def _host_wait(self, now: float) -> float:
        """How long an iteration that could start at `now` waits for the host (`host_per_call_s`)."""
        return max(0.0, self._host_free_at - now) if self._host_half else 0.0

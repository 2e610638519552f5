"""`agent`: agentrt's scheduler. Shortest expected remaining workflow first, warm calls first.

Model
- A workflow's end-to-end latency is what an agent user waits for, so the unit of scheduling is
  the workflow, not the call: the call whose workflow is expected to finish soonest goes first
  (shortest remaining processing time, which minimises mean completion time).
- Remaining work is not known; it is learned online. Each finished workflow's total work
  (`service.py`: computed prompt tokens plus output tokens) is kept per class, the class being
  (tenant, the agent of the workflow's first call), e.g. the orchestrator that starts it. For a
  live workflow that has attained `a`, the estimate is E[T - a | T > a] over its class's recent
  totals (the Gittins-style conditional mean), which is small for a workflow near its end. With
  no sample above `a` (a new class, or a workflow longer than any seen) the estimate is `a`
  itself, i.e. least attained service, which is what Autellix uses when nothing is known.
- The call's own prefill is added: its uncached prompt tokens at this moment. A call whose
  prefix is resident costs almost nothing to admit, so warm calls go before cold ones of
  similar workflows, before their prefix can be evicted.
- Admitted calls get the iteration's prefill tokens in the same order (remaining workflow work
  plus the prompt tokens the call has left to compute), so a short workflow's prefill is not
  stuck behind a long context's chunks.
- Workflow admission: when the live workflows' contexts (their working set, `contexts.py`,
  shared prefixes counted once) plus a new workflow's uncached prompt and output would not fit
  in the GPU pool beside what running requests hold, starting it would evict the context of a
  workflow that is only waiting on a tool, which then pays its prefill again. Its first call is
  held back if that recomputation, felt by every request in the engine, costs more waiting than
  holding it does (`overcommit.py`: long contexts on a busy replica); otherwise it goes and the
  engine recomputes a little. Calls of live workflows are not held for this. The pool size and
  the prefill cost are the engine's, so there is nothing to tune; `max_hold_s` bounds the hold
  (`base.py`).
- A call whose next uncached block is in a prompt being computed (a parallel instance forked
  from the same history as one just admitted, `inflight.py`) is held until that prompt is
  cached, then finds it: the shared prefix is computed once. Bounded by `max_wait_s`. Off on
  an engine that shares blocks as they are scheduled (vLLM V1; `engine_caches_at_schedule`).
- When the best call does not fit, later calls are admitted into free blocks only (`base.py`):
  a cold call never evicts the cache that a blocked warm call waits for.
- `max_wait_s` bounds every call's wait, as for every scheduler.
Nothing here is tuned to a workload: the only parameters are the sample window and the bound.
"""

from __future__ import annotations

from typing import ClassVar

from agentrt.runtime import events as ev
from agentrt.runtime.identity import anchor_agent
from agentrt.runtime.window import SampleWindow, window_in
from agentrt.sched.base import DEFAULT_MAX_HOLD_S, DEFAULT_MAX_WAIT_S, Scheduler
from agentrt.sched.contexts import LiveContexts
from agentrt.sched.inflight import InflightPrefixes
from agentrt.sched.overcommit import OvercommitCost
from agentrt.sched.service import AttainedService


class WorkflowSizes(SampleWindow):
    """The last `window` total works of finished workflows of one class, kept sorted."""

    __slots__ = ()

    def __init__(self, window: int) -> None:
        super().__init__(keep=window)

    def remaining(self, attained: int) -> float:
        """E[T - attained | T > attained] over the samples; `attained` when none is larger."""
        return self.residual(attained, float(attained))


class AgentScheduler(Scheduler):
    name: ClassVar[str] = "agent"
    description: ClassVar[str] = ("agent-aware: shortest expected remaining workflow first (learned per "
                                  "entry agent), warm calls first, a call waits for a prefix being computed, backfill "
                                  "into free memory, bounded wait")
    reorders: ClassVar[bool] = True
    skips_blocked: ClassVar[bool] = True
    wants_events: ClassVar[bool] = True
    reads_cache: ClassVar[bool] = True
    shapes_batch: ClassVar[bool] = True
    defers: ClassVar[bool] = True

    def __init__(self, max_wait_s: float = DEFAULT_MAX_WAIT_S, seed: int = 0,
                 max_hold_s: float = DEFAULT_MAX_HOLD_S, window: int = 512,
                 max_classes: int = 4096, prefix_hold: bool = True) -> None:
        super().__init__(max_wait_s, seed, max_hold_s)
        if window <= 0:
            raise ValueError(f"window must be > 0, got {window}")
        self.window = window
        self.max_classes = max_classes
        self.service = AttainedService()
        self.classes: dict[tuple[str, str], WorkflowSizes] = {}
        self.workflow_class: dict[tuple[str, str], tuple[str, str]] = {}
        self.live = LiveContexts()
        self.overcommit = OvercommitCost(window, max_classes)
        self.prefix_hold = prefix_hold             # False: the scheduler as it was before the hold
        self.inflight = InflightPrefixes()
        self._held_on_prefix: set[int] = set()      # rids held until a prompt being computed is cached

    def observe(self, e) -> None:
        if self.prefix_hold:
            self.inflight.observe(e)
            if type(e) is ev.CallAdmitted or type(e) is ev.CallFinished:
                self._held_on_prefix.discard(e.call.rid)
        if type(e) is ev.CallArrived:
            c = e.call
            k = (c.tenant, c.workflow)
            if not c.warmup:
                self.overcommit.arrived(k, e.now)
                if k not in self.workflow_class:
                    agent = c.agent or anchor_agent(c.hash_ids, c.input_length, c.block_size)
                    self.workflow_class[k] = (c.tenant, agent)
            return
        self.service.observe(e)
        t = type(e)
        if t is ev.PromptCached or t is ev.CallFinished:
            if not e.call.warmup and e.node is not None:
                self.live.set((e.call.tenant, e.call.workflow), e.node)
        elif t is ev.WorkflowEnded:
            k = (e.tenant, e.workflow)
            cls = self.workflow_class.pop(k, None)
            self.overcommit.ended(k, cls, self.live.blocks_of(k))
            self.live.drop(k)
            done = self.service.ended
            if cls is None or done is None or done[0] != k:
                return
            window_in(self.classes, cls, self.max_classes, lambda: WorkflowSizes(self.window)).add(done[1])

    def expected_remaining(self, call) -> float:
        k = (call.tenant, call.workflow)
        a = self.service.work.get(k, 0)
        cls = self.workflow_class.get(k)
        sizes = self.classes.get(cls) if cls is not None else None
        return sizes.remaining(a) if sizes is not None else float(a)

    def defer(self, call, arrival, view) -> bool:
        if call.warmup:
            return False
        cached = view.cached_blocks(call)
        if (self.prefix_hold and self.inflight and not self.aged(arrival, view.now)
                and self.inflight.computing_next(call, cached)):
            self._held_on_prefix.add(call.rid)
            return True
        self._held_on_prefix.discard(call.rid)
        if (call.tenant, call.workflow) in self.live or not self.live.workflows:
            return False
        bs = call.block_size
        own = call.n_full - cached + -(-call.output_length // bs) + 1
        free = view.capacity_blocks - view.reserved_blocks
        live = len(self.live)
        if live + own <= free:
            return False
        cls = self.workflow_class.get((call.tenant, call.workflow))
        return self.overcommit.worth_holding(cls, own, live, free, bs, view)

    def engine_caches_at_schedule(self) -> None:
        # calls admitted together share there already: holding one would only delay it
        self.prefix_hold = False

    def wakes_on_prefill(self) -> bool:
        return bool(self._held_on_prefix)

    def held_until(self, call, arrival: float) -> float:
        if call.rid in self._held_on_prefix:
            return arrival + self.max_wait_s     # the hold's own bound (a prefill normally ends it)
        return arrival + self.max_hold_s

    def key(self, call, arrival, view):
        uncached = call.input_length - view.cached_blocks(call) * call.block_size
        return (self.expected_remaining(call) + max(uncached, 1), arrival)

    def batch_key(self, call, arrival, prefill_left):
        return (self.expected_remaining(call) + prefill_left, arrival)

    def state_bytes(self) -> int:
        return (200 * len(self.workflow_class) + 16 * sum(len(s) for s in self.classes.values())
                + 100 * len(self.inflight) + 24 * len(self.overcommit))

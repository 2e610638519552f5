"""The runtime's table of open workflows and what bounds it: `WorkflowTable`, owned by `AgentRuntime`.

Model
- A workflow opens with its first call and is dropped when it ends: its framework says so
  (`WorkflowEnded`, reason "end"), or the runtime decides it is over. Workflows are keyed by
  (tenant, workflow id) (`WorkflowState.key`): ids are the tenants' own, so an end or a call
  naming tenant B's `run-42` never reaches tenant A's.
- Caps: at most `max_workflows_per_tenant` open workflows per tenant and `max_workflows` in all.
  A new workflow over a cap first ends the tenant's (resp. the runtime's) oldest idle workflow
  (no call in flight; least recently active first): reason "cap", counted in `forced_ends`. A
  workflow with a call in flight is never ended, so the caps can be exceeded by calls in flight
  only (the engine bounds those).
- Silence: `sweep(now)` ends the workflows silent for `silent_after_s` with nothing in flight
  (reason "silent", counted in `silent_ends`); engines call it on a timer and `observe` every
  `SWEEP_EVERY` events. Idle workflows are kept in order of last activity (the finish that left
  them idle), per tenant too, so a sweep or a cap costs what it ends, plus one.
- Whatever ends a workflow, the policy sees its `WorkflowEnded` before it is dropped, and an
  engine that exports ends per tenant gets `on_end(workflow, reason)` once, after the drop.
`WorkflowTable` owns the table, the idle orderings and the end counts, and is given the policy
(which sees each end); `AgentRuntime` (`runtime.py`) opens workflows and moves them between
running and idle as calls arrive and finish. Time is passed in (`now`), never read here.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

from agentrt.runtime import events as ev
from agentrt.runtime.policy import Policy
from agentrt.runtime.state import WorkflowState


class WorkflowTable:
    """Open workflows keyed by (tenant, id), their idle order, the caps and the silence sweep."""

    def __init__(self, policy: Policy, silent_after_s: float, max_workflows: int | None,
                 max_workflows_per_tenant: int | None) -> None:
        self.policy = policy
        self.silent_after_s = silent_after_s
        self.max_workflows = max_workflows
        self.max_workflows_per_tenant = max_workflows_per_tenant
        self.workflows: dict[tuple[str, str], WorkflowState] = {}      # (tenant, id) -> state
        # live workflows with no call in flight, least recently active first (by key); per tenant
        # too (by id)
        self.between_calls: OrderedDict[tuple[str, str], WorkflowState] = OrderedDict()
        self._idle_by_tenant: dict[str, OrderedDict[str, WorkflowState]] = {}
        self._open_by_tenant: dict[str, int] = {}
        self.forced_ends = 0         # workflows ended by the caps (reason "cap")
        self.silent_ends = 0         # workflows ended by the silence sweep (reason "silent")
        self.on_end: Callable[[WorkflowState, str], None] | None = None

    def sweep(self, now: float) -> int:
        """End the workflows silent for `silent_after_s` with nothing in flight (their framework
        never said); the policy sees a `WorkflowEnded` (reason "silent") for each. Returns how
        many ended. Engines call this on a timer (e.g. every few seconds, with the engine's
        clock); `observe` also calls it every 256 events. Cost: what it ends, plus one."""
        cutoff = now - self.silent_after_s
        silent = []
        for wf in self.between_calls.values():   # least recently active first
            if wf.last_seen >= cutoff:
                break
            silent.append(wf)
        for wf in silent:
            self.silent_ends += 1
            self._end(wf, now, "silent")
        return len(silent)

    def open(self, tenant: str, wid: str, now: float) -> WorkflowState:
        """A call of a workflow not open yet: make room under the caps, then open it."""
        self._make_room(tenant, now)
        wf = WorkflowState(wid, tenant, now)
        self.workflows[wf.key] = wf
        self._open_by_tenant[tenant] = self._open_by_tenant.get(tenant, 0) + 1
        return wf

    def ended(self, e: ev.WorkflowEnded) -> None:
        """Its framework ended a workflow: the policy sees it (ended=True), then it is dropped."""
        wf = self.workflows.get(e.key)
        if wf is not None:
            wf.ended = True
        try:
            self.policy.observe(e)
        finally:
            if wf is not None:
                self._drop(wf)
                if self.on_end is not None:
                    self.on_end(wf, e.reason)

    def _end(self, wf: WorkflowState, now: float, reason: str) -> None:
        """End a workflow the runtime decided is over: the policy sees it, then it is dropped."""
        wf.ended = True
        try:
            self.policy.observe(ev.WorkflowEnded(now, wf.id, wf.tenant, reason))
        finally:
            self._drop(wf)
            if self.on_end is not None:
                self.on_end(wf, reason)

    def _drop(self, wf: WorkflowState) -> None:
        if self.workflows.get(wf.key) is wf:
            del self.workflows[wf.key]
            n = self._open_by_tenant[wf.tenant] - 1
            if n:
                self._open_by_tenant[wf.tenant] = n
            else:
                del self._open_by_tenant[wf.tenant]
        self.not_idle(wf)

    def idle(self, wf: WorkflowState) -> None:
        """Its last call in flight finished: the most recently active idle workflow."""
        self.between_calls[wf.key] = wf
        t = self._idle_by_tenant.get(wf.tenant)
        if t is None:
            t = self._idle_by_tenant[wf.tenant] = OrderedDict()
        t[wf.id] = wf

    def not_idle(self, wf: WorkflowState) -> None:
        if self.between_calls.get(wf.key) is wf:
            del self.between_calls[wf.key]
            t = self._idle_by_tenant[wf.tenant]
            del t[wf.id]
            if not t:
                del self._idle_by_tenant[wf.tenant]

    def _make_room(self, tenant: str, now: float) -> None:
        """Before a new workflow of `tenant` opens: end the oldest idle workflows over the caps."""
        cap = self.max_workflows_per_tenant
        if cap is not None:
            while self._open_by_tenant.get(tenant, 0) >= cap:
                idle = self._idle_by_tenant.get(tenant)
                if not idle:
                    break                       # all busy: calls in flight are never dropped
                self.forced_ends += 1
                self._end(next(iter(idle.values())), now, "cap")
        cap = self.max_workflows
        if cap is not None:
            while len(self.workflows) >= cap and self.between_calls:
                self.forced_ends += 1
                self._end(next(iter(self.between_calls.values())), now, "cap")

    def workflow(self, tenant: str, wid: str) -> WorkflowState | None:
        """The live workflow `wid` of `tenant`, if open."""
        return self.workflows.get((tenant, wid))

    def open_workflows(self, tenant: str | None = None) -> int:
        """Open workflows, of one tenant or in all."""
        return len(self.workflows) if tenant is None else self._open_by_tenant.get(tenant, 0)

    @property
    def tenants(self) -> int:
        """Tenants with an open workflow."""
        return len(self._open_by_tenant)

"""`agentrt serve --scheduler NAME`: the scheduler object the simulator runs, fed with the server's
calls, for the admission gate (`gate.py`).

Model
- One scheduler instance (`agentrt.sched`, the same class the simulator runs) sees the server's
  user calls through the events the simulator gives it, at the moments the gate sees them:
  `CallArrived` when a call enters the gate, `PromptCached` when its answer's first byte comes
  back (the engine computed its prompt), `CallAdmitted` then `CallFinished` when the answer
  ends: admission carries the cached prefix the engine reported (`usage.prompt_tokens_details.
  cached_tokens`, as a share of the prompt's blocks), which the server learns only then (a
  stream without usage: the server's estimate at the release). A call that failed or left
  before its release only finishes (it took no service). `WorkflowEnded`: `X-Workflow-End`, the
  end route, the runtime's own ends. Warm-ups are not shown to it. Schedulers that want no
  events get none, as in the simulator.
- Nodes: `PromptCached` and `CallFinished` carry the call's deepest full prompt block as a
  `Block` with parent links (`prompt_tree.py`), so `agent`'s live-context accounting
  (`sched/contexts.py`) works as in the simulator; `CallAdmitted` carries the deepest cached one.
  The output's blocks are not known to the server (it does not tokenize), so a context grows by
  its output only when the next prompt carries it.
- Units are the server's: a call's `input_length` is its prompt blocks times `block_chars`
  characters (`blocks.py`), its expected output `max_tokens` x `CHARS_PER_TOKEN` characters,
  its real output at the finish the answer's completion tokens x `CHARS_PER_TOKEN`.
- vLLM V1 shares a prompt's blocks as soon as they are scheduled, so the scheduler is told so
  (`engine_caches_at_schedule`: `agent` then holds no call for a prompt being computed; the
  engine shares it itself).
- Order (`order`): the simulator's `Scheduler.rank` (calls past `max_wait_s` first, then `key`).
  With `tenant_fair` (under `--auth`, for a scheduler other than `fair`) a `FairScheduler` fed
  the same events orders the tenants: each tenant's calls, in the scheduler's order, take the
  places of that tenant's `fair` ranks, so the tenants' calls interleave by weighted virtual
  time (one tenant's burst cannot push another's held calls back) and the scheduler still
  decides which of a tenant's calls goes first.
- Priority: at release each call also gets `Scheduler.priority` as vLLM's `priority`, which an
  upstream run with `--scheduling-policy priority` uses to pick the lowest-ranked request to
  preempt (the simulator's victim under a reordering scheduler); under vLLM's default fcfs it
  is accepted and ignored.
With `fcfs` (the default) nothing is made: the server forwards every call at once, as before.
"""

from __future__ import annotations

from dataclasses import replace

from agentrt.runtime import events as ev
from agentrt.serve.live_view import CHARS_PER_TOKEN
from agentrt.serve.prompt_tree import PromptTree
from agentrt.wire.priority import INT64


class ServeScheduler:
    def __init__(self, name: str = "fcfs", options: dict | None = None, tenant_fair: bool = False,
                 tenant_weights=None, max_nodes: int = 1 << 17) -> None:
        from agentrt.sched.registry import make_scheduler
        self.name = name
        self.sched = make_scheduler(name, **(options or {}))      # AgentrtError on a bad name or option
        self.active = bool(self.sched.reorders)
        self.sched.engine_caches_at_schedule()
        self.tenants = None
        if self.active and tenant_fair and name != "fair":
            bounds = {k: v for k, v in (options or {}).items() if k in ("max_wait_s", "max_hold_s")}
            self.tenants = make_scheduler("fair", weights=tenant_weights, **bounds)
        self.tree = PromptTree(max_nodes)
        self.released = 0
        self._prio: list[int] = []          # [lowest, highest] priority sent

    def _observe(self, e) -> None:
        if self.sched.wants_events:
            self.sched.observe(e)
        if self.tenants is not None:
            self.tenants.observe(e)

    def _node(self, info: ev.CallInfo, depth: int):
        return self.tree.node(info.tenant, info.hash_ids, depth)

    @staticmethod
    def full_depth(info: ev.CallInfo) -> int:
        """The prompt's full blocks: the server's last block may be partial (`view.py` records
        the same prefix)."""
        return max(0, len(info.hash_ids) - 1)

    # ------------------------------------------------------------------ events
    def arrive(self, info: ev.CallInfo, now: float) -> ev.CallInfo:
        """The scheduler's own copy of the call (the runtime's `CallInfo` stays untouched),
        output in characters; observed as arrived."""
        mine = replace(info, extra=dict(info.extra), output_length=info.output_length * CHARS_PER_TOKEN)
        self._observe(ev.CallArrived(now, mine))
        return mine

    def admitted(self, info: ev.CallInfo, now: float, cached: int) -> None:
        self._observe(ev.CallAdmitted(now, info, self._node(info, cached), cached, 0))

    def prompt_cached(self, info: ev.CallInfo, now: float, cached: int) -> None:
        d = self.full_depth(info)
        self._observe(ev.PromptCached(now, info, self._node(info, d), max(0, d - cached)))

    def finished(self, info: ev.CallInfo, now: float, released: bool, ok: bool,
                 output_tokens: int | None, tool_call: bool = False) -> None:
        """The call's answer ended (`ok`: a 200 answer; `released`: it went to the engine) or it
        left the gate (not released: it took no service). A failed call computed no output."""
        out = output_tokens if ok and isinstance(output_tokens, int) and output_tokens >= 0 else 0
        info.output_length = out * CHARS_PER_TOKEN
        node = self._node(info, self.full_depth(info)) if released and ok else None
        self._observe(ev.CallFinished(now, info, node, tool_call and ok))

    def workflow_ended(self, workflow: str, tenant: str, now: float) -> None:
        self._observe(ev.WorkflowEnded(now, workflow, tenant))

    # ------------------------------------------------------------------ ranking
    def order(self, held: list, view) -> list:
        """`held` (items with `.info` and `.arrival`) in release order (see the module)."""
        rank = self.sched.rank
        out = sorted(held, key=lambda t: rank(t.info, t.arrival, view))
        if self.tenants is None or len(out) < 2:
            return out
        frank = self.tenants.rank
        by_tenant: dict[str, list] = {}
        for t in out:
            by_tenant.setdefault(t.info.tenant, []).append(t)
        if len(by_tenant) < 2:
            return out
        placed = []
        for items in by_tenant.values():
            slots = sorted(frank(t.info, t.arrival, view) for t in items)
            placed.extend(zip(slots, range(len(placed), len(placed) + len(items)), items))
        placed.sort(key=lambda p: (p[0], p[1]))
        return [t for _, _, t in placed]

    def priority(self, info: ev.CallInfo, arrival: float, view) -> int:
        p = max(INT64[0], min(INT64[1], int(self.sched.priority(info, arrival, view))))
        self.released += 1
        self._prio = [p, p] if not self._prio else [min(self._prio[0], p), max(self._prio[1], p)]
        return p

    def stats(self) -> dict:
        if not self.active:
            return {"scheduler": self.name, "gate": False, "sends_priority": False}
        return {"scheduler": self.name, "gate": True, "sends_priority": True,
                "tenant_fair": self.tenants is not None, "released": self.released,
                "priority_min": self._prio[0] if self._prio else None,
                "priority_max": self._prio[1] if self._prio else None,
                "state_bytes": self.sched.state_bytes(), "nodes": len(self.tree)}

"""`AgentRuntime`: the layer between engines and policies.

Engines (the simulator, the vLLM connector, the server) create one runtime around one policy and
feed it events; the cache ranks blocks through it. The runtime does what every agent-aware policy
needs, once:
- identity: the agent named by the trace or request, else one inferred from the prompt's anchor
  (`identity.py`), so frameworks that send no metadata still get agents;
- workflow lifecycles: a table of live workflows (agent path, threads, calls in flight) keyed by
  (tenant, workflow id), dropped when a workflow ends or stays silent for `silent_after_s` with
  nothing in flight; a `WorkflowEnded` ends only its own tenant's workflow of that id;
- bounded state: at most `max_workflows_per_tenant` open workflows per tenant and `max_workflows`
  in all, and a silence sweep (`WorkflowTable`, `lifecycle.py`; `workflows` and
  `between_calls` are its tables);
- bounded threads: a workflow has at most `max_threads_per_workflow` threads (1,024: no framework
  runs that many agents in one workflow); calls of further agents share one thread named
  `~other` (`overflow_calls` counts them), so a client inventing an agent per call cannot grow
  one workflow's state without bound;
- agent profiles: each agent's anchor blocks (confirmed by two or more workflows) and mean think
  time after its calls; at most `max_agents`, the least recently seen of the tenant holding the
  most dropped first (`tenant_lru.py`: a tenant inventing agents drops its own profiles, not
  another's that holds its share);
- block tags (only for policies with `needs_tags`): which threads used each cached block, written
  when a call finishes, before its blocks can be evicted; for policies with
  `untags_dead_branches`, a thread leaves the blocks of a history branch it abandoned
  (`branches.py`).
Then it forwards the event to the policy. Warm-up calls are forwarded but never learned from.
- the LRU safety net (`safety_net.py`, on by default, `safety_net=NetConfig(enabled=False)` or
  False turns it off): a sampled shadow LRU on the same calls; while the policy measurably loses
  to it, blocks are ranked in LRU order. Engines rank through `ranker` (`score`, `epoch`), which
  is the policy itself when there is no net (LRU, a bound, a policy that opts out with
  `safety_net = False`, or an engine that gives the runtime no `cached_blocks` count).

Time is passed in (`now`), never read here, non-decreasing per runtime.
"""

from __future__ import annotations

from collections.abc import Callable

from agentrt.runtime import events as ev
from agentrt.runtime.branches import untag_dead_branch
from agentrt.runtime.identity import anchor_agent
from agentrt.runtime.lifecycle import WorkflowTable
from agentrt.runtime.policy import Policy
from agentrt.runtime.safety_net import NetConfig, SafetyNet
from agentrt.runtime.state import AgentProfile, Thread, WorkflowState, tag_path
from agentrt.runtime.tenant_lru import TenantLRU


OVERFLOW_AGENT = "~other"    # the shared thread of a workflow's agents past `max_threads_per_workflow`


class AgentRuntime:
    SWEEP_EVERY = 256        # events between two sweeps from `observe`

    def __init__(self, policy: Policy, *, anchor_tokens: int = 256, max_anchor_tokens: int = 8192,
                 silent_after_s: float = 600.0, max_agents: int = 4096,
                 max_workflows: int | None = 65536,
                 max_workflows_per_tenant: int | None = 8192,
                 max_threads_per_workflow: int | None = 1024,
                 safety_net: bool | NetConfig = True) -> None:
        for name, v in (("max_workflows", max_workflows),
                        ("max_workflows_per_tenant", max_workflows_per_tenant),
                        ("max_threads_per_workflow", max_threads_per_workflow)):
            if v is not None and v < 1:
                raise ValueError(f"{name} must be >= 1 (or None: no cap), got {v}")
        self.policy = policy
        self.anchor_tokens = anchor_tokens
        self.max_anchor_tokens = max_anchor_tokens
        self.max_agents = max_agents
        self.max_threads_per_workflow = max_threads_per_workflow
        self.overflow_calls = 0      # calls folded into a workflow's OVERFLOW_AGENT thread
        self.lifecycle = WorkflowTable(policy, silent_after_s, max_workflows, max_workflows_per_tenant)
        # the table's own dicts, read by policies and engines (never rebound)
        self.workflows = self.lifecycle.workflows
        self.between_calls = self.lifecycle.between_calls
        self.agents = TenantLRU(max_agents, on_drop=self._profile_dropped)   # (tenant, agent) -> AgentProfile
        self._calls: dict[int, Thread] = {}
        self._events = 0
        self.touch_clock: Callable[[], int] = lambda: 0
        self.tags = policy.needs_tags
        self.untag_branches = policy.needs_tags and policy.untags_dead_branches
        self.net = self._make_net(policy, safety_net)
        self.ranker = self.net if self.net is not None else policy
        self.wants_events = policy.wants_events or policy.needs_tags or self.net is not None
        self.errors = 0
        self.profiles_dropped = 0    # agent profiles dropped past `max_agents`
        policy.bind(self)

    @staticmethod
    def _make_net(policy: Policy, config: bool | NetConfig) -> SafetyNet | None:
        if config is True:
            config = NetConfig()
        if not config or not config.enabled or not getattr(policy, "safety_net", True):
            return None
        core = policy
        while getattr(core, "inner", None) is not None:
            core = core.inner         # under tenant shares and the retention floor
        if type(core).score is Policy.score and not core.acts:
            return None               # LRU itself: nothing to fall back to
        return SafetyNet(policy, config)

    @property
    def cached_blocks(self) -> Callable[[], int] | None:
        """The engine's count of its cached GPU blocks now, set by the engine as `touch_clock` is:
        the safety net's shadow follows that size, and until it is set the net stays out."""
        return self.net.shadow.cached if self.net is not None else None

    @cached_blocks.setter
    def cached_blocks(self, fn: Callable[[], int] | None) -> None:
        if self.net is not None:
            self.net.shadow.cached = fn

    # ------------------------------------------------------------------ the workflow table
    @property
    def silent_after_s(self) -> float:
        return self.lifecycle.silent_after_s

    @silent_after_s.setter
    def silent_after_s(self, v: float) -> None:
        self.lifecycle.silent_after_s = v

    @property
    def max_workflows(self) -> int | None:
        return self.lifecycle.max_workflows

    @max_workflows.setter
    def max_workflows(self, v: int | None) -> None:
        self.lifecycle.max_workflows = v

    @property
    def max_workflows_per_tenant(self) -> int | None:
        return self.lifecycle.max_workflows_per_tenant

    @max_workflows_per_tenant.setter
    def max_workflows_per_tenant(self, v: int | None) -> None:
        self.lifecycle.max_workflows_per_tenant = v

    @property
    def on_end(self) -> Callable[[WorkflowState, str], None] | None:
        """Called once with each workflow the runtime held as it ends, after the drop."""
        return self.lifecycle.on_end

    @on_end.setter
    def on_end(self, fn: Callable[[WorkflowState, str], None] | None) -> None:
        self.lifecycle.on_end = fn

    @property
    def forced_ends(self) -> int:
        return self.lifecycle.forced_ends

    @property
    def silent_ends(self) -> int:
        return self.lifecycle.silent_ends

    def sweep(self, now: float) -> int:
        """End the workflows silent for `silent_after_s` with nothing in flight (`WorkflowTable.sweep`)."""
        return self.lifecycle.sweep(now)

    def workflow(self, tenant: str, wid: str) -> WorkflowState | None:
        """The live workflow `wid` of `tenant`, if open."""
        return self.lifecycle.workflows.get((tenant, wid))

    def open_workflows(self, tenant: str | None = None) -> int:
        """Open workflows, of one tenant or in all."""
        return self.lifecycle.open_workflows(tenant)

    # the cache ranks through these (`ranker`: the policy, or the safety net around it)
    @property
    def dynamic(self) -> bool:
        return self.ranker.dynamic

    @property
    def epoch(self) -> int:
        return self.ranker.epoch

    def score(self, block):
        return self.ranker.score(block)

    def predict(self, horizon: int):
        return self.policy.predict(horizon)

    def act(self, now: float, view) -> list:
        acts = self.policy.act(now, view)
        return self.net.actions(acts) if self.net is not None and acts else acts

    # ------------------------------------------------------------------ identity
    def resolve_agent(self, info: ev.CallInfo) -> str:
        """The call's agent: explicit, or `anchor:<id>` from its leading blocks."""
        if info.agent:
            return info.agent
        info.agent = anchor_agent(info.hash_ids, info.input_length, info.block_size, self.anchor_tokens)
        info.agent_explicit = False
        return info.agent

    def profile(self, tenant: str, agent: str) -> AgentProfile | None:
        return self.agents.get((tenant, agent))

    def _profile_for(self, tenant: str, agent: str) -> AgentProfile:
        key = (tenant, agent)
        p = self.agents.get(key)
        if p is None:
            p = AgentProfile(agent, tenant)
            self.agents.set(key, p)
        else:
            self.agents.touch(key)
        return p

    def _profile_dropped(self, tenant: str, agent: str, profile: AgentProfile) -> None:
        self.profiles_dropped += 1

    # ------------------------------------------------------------------ events
    def observe(self, e: ev.Event) -> None:
        if self.net is not None:
            self.net.observe(e)
        t = type(e)
        if t is ev.CallArrived:
            self._arrived(e)
        elif t is ev.CallFinished:
            self._finished(e)
        elif t is ev.WorkflowEnded:
            self.lifecycle.ended(e)   # the policy sees it before the table drops the workflow
            self._tick(e.now)
            return
        self.policy.observe(e)
        self._tick(e.now)

    def _tick(self, now: float) -> None:
        self._events += 1
        if self._events % self.SWEEP_EVERY == 0:
            self.lifecycle.sweep(now)

    def stats(self) -> dict:
        """Counters for engines' metrics: open and idle workflows, ends forced by the caps and by
        the silence sweep, the caps themselves."""
        return {"open_workflows": len(self.workflows), "idle_workflows": len(self.between_calls),
                "calls_in_flight": len(self._calls), "tenants": self.lifecycle.tenants,
                "agents": len(self.agents), "forced_ends": self.forced_ends,
                "silent_ends": self.silent_ends, "overflow_calls": self.overflow_calls,
                "max_workflows": self.max_workflows,
                "max_workflows_per_tenant": self.max_workflows_per_tenant,
                **(self.net.stats() if self.net is not None else {})}

    # ------------------------------------------------------------------ calls
    def _arrived(self, e: ev.CallArrived) -> None:
        info = e.call
        if info.warmup:
            return
        agent = self.resolve_agent(info)
        wf = self.workflows.get(info.key)
        if wf is None:
            wf = self.lifecycle.open(info.tenant, info.workflow, e.now)
        cap = self.max_threads_per_workflow
        if cap is not None and agent not in wf.threads and len(wf.threads) >= cap:
            # a workflow naming more agents than any framework runs (a client inventing one per
            # call): the rest share one thread, so its state and per-call work stay bounded
            agent = info.agent = OVERFLOW_AGENT
            self.overflow_calls += 1
        if wf.last_finish is not None and wf.last_agent is not None and wf.running == 0:
            prev = self._profile_for(wf.tenant, wf.last_agent)
            prev.think_total_s += max(0.0, e.now - wf.last_finish)
            prev.think_count += 1
        prof = self._profile_for(info.tenant, agent)
        prof.observe_prompt(info.hash_ids, info.n_full, info.workflow,
                            max(1, self.max_anchor_tokens // info.block_size))
        wf.last_seen = e.now
        self.lifecycle.not_idle(wf)
        wf.path.append(agent)
        if len(wf.path) > 64:
            del wf.path[:-64]
        wf.signal = info.signal
        wf.running += 1
        th = wf.thread(agent)
        th.calls += 1
        wf.calls += 1
        self._calls[info.rid] = th

    def _finished(self, e: ev.CallFinished) -> None:
        info = e.call
        th = self._calls.pop(info.rid, None)
        if th is None:
            return
        wf = th.workflow
        wf.running -= 1
        if wf.running == 0 and not wf.ended:
            self.lifecycle.idle(wf)
        wf.last_seen = e.now
        wf.last_finish = e.now
        wf.last_agent = th.agent
        node = e.node
        if node is not None:
            old = th.last_node
            if (self.untag_branches and old is not None and old is not node
                    and th not in self._calls.values()):
                # (with a parallel call of the same thread in flight, both branches are live)
                untag_dead_branch(old, node, th)
            th.last_node = node
            if self.tags:
                tag_path(node, th)

    def keep_preempted(self, rid: int, node) -> None:
        """The engine preempted call `rid` (freed its memory; it runs again) and keeps the blocks
        it completed, up to `node`, as cache: they carry its thread, as a finished call's path
        does, so policies rank them. No event and no state change: the call is still in flight."""
        th = self._calls.get(rid)
        if th is not None and node is not None and self.tags:
            tag_path(node, th)

    def state_bytes(self) -> int:
        """Rough size of the runtime's own tables plus the policy's state."""
        n = 0
        for wf in self.workflows.values():
            n += 200 + 8 * len(wf.path) + 120 * len(wf.threads)
        for p in self.agents.values():
            n += 150 + 8 * len(p.anchor)
        n += 100 * len(self._calls)
        return n + self.policy.state_bytes() + (self.net.state_bytes() if self.net is not None else 0)

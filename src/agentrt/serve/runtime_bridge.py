"""The server's side of the runtime: requests become runtime events, the policy's actions become
real upstream requests.

Model
- Each user call is `CallArrived` when it comes in (identity resolved, the agent inferred from the
  prompt's anchor when not given) and `CallFinished` when its response ends (node None: the server
  sees no blocks); `X-Workflow-End` adds `WorkflowEnded` after it. `now` comes from the clock
  passed in (monotonic seconds).
- Between requests, when no user call waits for the first byte of its answer (a stream that is
  answering is decoding: it does not hold warm-ups back, whoever's it is), `act(now, view)` runs
  (when the last such call got its answer and every `act_interval_s`) and warm-ups become
  upstream requests, each tenant's within its `warmup_share`: `act_loop.py`.
- The policy's view of the engine is an estimate (`view.py`): the server sees no block events.
- With a scheduler other than `fcfs` (`scheduler.py`), each user call enters the admission gate
  (`gate.py`, `Call.ticket`): it waits there, in the scheduler's order, until the engine has
  room, and goes with the vLLM `priority` the scheduler gives it at its release
  (`Call.priority`); warm-ups get `WARMUP_PRIORITY` (after every user call) and bypass the gate
  (they are sent only while no user call waits for its first answer byte, held ones included).
- Tenancy: the runtime and the scheduler see each workflow under its tenant-scoped key
  (`Identity.key`), agent profiles and templates are keyed by (tenant, agent) and the cache
  estimate by (tenant, block); warm-ups carry their tenant's `cache_salt` (`salts`, set by the app).
- `retain_tool_calls` (`--retain-tool-calls`): a call that may end in a tool call carries vLLM's
  standard `kv.retain` for its context (`retain_for`): the server learns that a call ended in a
  tool call only from its answer, after the engine has freed its blocks, so the hint goes with
  the call and the connector applies it when the call finishes. Its duration is the agent's
  mean wait after its calls so far (the runtime's profile: in a tool loop, the tool time); the
  workflow's end releases it early.
- Workflow ends: the runtime reports each workflow it held as it ends (`AgentRuntime.on_end`),
  counted in `agentrt_workflows_ended_total` by tenant and reason: "client" (`X-Workflow-End`,
  the end route), "call" (a call with no workflow identity is a workflow of its own), "cap"
  (ended idle to make room) or "silent" (the sweep: every 256 events and on a timer).
- The runtime never makes a request fail: every call into it is guarded, counted in
  `agentrt_runtime_errors_total` and logged once per place; the request goes on without it.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections import deque
from collections.abc import Callable

from agentrt.errors import AgentrtError
from agentrt.policies.registry import BOUNDS, make_policy
from agentrt.runtime import events as ev
from agentrt.runtime.runtime import AgentRuntime
from agentrt.serve.blocks import PromptBlocks, chat_segments, completion_segments
from agentrt.serve.blocks import prompt_blocks, template, tenant_seed
from agentrt.serve.act_loop import ActLoop
from agentrt.serve.identity import Identity
from agentrt.serve.gate import AdmissionGate
from agentrt.serve.live_view import PrefillRate
from agentrt.serve.metrics import GateMetrics, ServeMetrics, usage_tokens
from agentrt.serve.scheduler import ServeScheduler
from agentrt.serve.templates import TemplateStore
from agentrt.serve.validate import MAX_OUTPUT_TOKENS
from agentrt.serve.view import CacheEstimate

log = logging.getLogger("agentrt.serve")


def retain_for(runtime, body: dict, ident: Identity, agent: str) -> float | None:
    """Seconds to retain a call's context for, or None: only a call that declares tools (its
    answer may be a tool call) of a workflow that goes on, whose agent has a mean wait after its
    calls so far (nothing is known of a new agent)."""
    if ident.end or not (body.get("tools") or body.get("functions")):
        return None
    prof = runtime.profile(ident.tenant, agent)
    wait = prof.mean_think_s if prof is not None else None
    return round(min(wait, 86400.0), 3) if wait is not None and wait > 0 else None


class Call:
    __slots__ = ("info", "ident", "agent", "endpoint", "started", "blocks", "priority", "sched_info",
                 "answering", "ticket")

    @property
    def index(self) -> int | None:
        return self.info.index if self.info is not None else None

    def __init__(self, info, ident: Identity, agent: str, endpoint: str, started: float,
                 blocks: PromptBlocks | None) -> None:
        self.info, self.ident, self.agent, self.endpoint = info, ident, agent, endpoint
        self.started, self.blocks = started, blocks
        self.priority: int | None = None     # the vLLM priority to send (None: leave the body's)
        self.sched_info = None               # the scheduler's copy of `info`
        self.answering = False               # the first byte of its answer came back
        self.ticket = None                   # its place in the admission gate (None: not gated)


class RuntimeBridge:
    def __init__(self, policy: str, options: dict | None = None, *, block_chars: int = 256,
                 max_anchor_blocks: int = 64, kv_capacity_tokens: int = 0,
                 act_interval_s: float = 0.25, clock: Callable[[], float] = time.monotonic,
                 max_templates: int = 4096, max_agent_labels: int = 256,
                 max_tenant_labels: int = 256, scheduler: str = "fcfs",
                 scheduler_options: dict | None = None, known_tenants: int = 0,
                 template_bytes_per_tenant: int = 8 << 20, template_bytes: int = 64 << 20,
                 warmup_share: float = 0.25, retain_tool_calls: bool = False,
                 gate_options: dict | None = None, tenant_fair: bool = False, prefill_cost=None) -> None:
        if policy in BOUNDS:
            raise AgentrtError(f"'{policy}' is a bound (it needs the future of a trace), not a policy "
                               f"a server can run")
        pol = make_policy(policy, **(options or {}))
        if pol.needs_training:
            log.warning("policy %s learns offline; behind the server it runs untrained%s", policy,
                        " (forecasting from agent transitions it learns online)" if getattr(pol, "online", False) else "")
        self.policy_name = policy
        self.runtime = AgentRuntime(pol, anchor_tokens=block_chars,
                                    max_anchor_tokens=block_chars * max_anchor_blocks)
        self.metrics = ServeMetrics(policy, max_agent_labels, max_tenant_labels, known_tenants)
        self.runtime.on_end = self._ended
        self._end_reason = "client"
        self.metrics.workflows_open.labels(policy).set_function(lambda: len(self.runtime.workflows))
        self.cache = CacheEstimate(kv_capacity_tokens)
        opts = dict(scheduler_options or {})
        self.scheduler = ServeScheduler(scheduler, opts, tenant_fair=tenant_fair, tenant_weights=opts.get("weights"))
        self.gate: AdmissionGate | None = None
        if self.scheduler.active:
            self.gate = AdmissionGate(self.scheduler, self.cache,
                                      GateMetrics(self.metrics.registry, scheduler, self.metrics.tenant_label),
                                      clock=clock, guard=self.guard, report=self.report,
                                      block_chars=block_chars, prefill=PrefillRate(prefill_cost),
                                      fixed_capacity=kv_capacity_tokens > 0, **(gate_options or {}))
        self.block_chars = block_chars
        self.max_anchor_blocks = max_anchor_blocks
        self.clock = clock
        self.in_flight = 0
        self.starting = 0                # calls in flight that have no answer byte yet
        self.acts = ActLoop(self, act_interval_s, warmup_share)   # the act loop and the warm-up state
        self.retain_tool_calls = retain_tool_calls
        self.recent: deque = deque(maxlen=256)
        # (tenant, agent) -> its latest prompt's template, bounded by count and bytes (templates.py)
        self.templates = TemplateStore(max_templates, template_bytes_per_tenant, template_bytes)
        self.request_ids = itertools.count(1)
        self._calls = itertools.count(1)
        self._logged: set[str] = set()
        self.salts: Callable[[str], str | None] = lambda tenant: None     # tenant -> cache_salt
        self.capacity_stale = False      # re-read the engine's KV capacity (the upstream failed)

    # ------------------------------------------------------------------ guarded runtime calls
    def guard(self, where: str, fn, *args, default=None):
        try:
            return fn(*args)
        except Exception:
            self.report(where)
            return default

    def report(self, where: str) -> None:
        """Count the exception being handled; log it the first time `where` fails."""
        self.metrics.runtime_errors.labels(self.policy_name, where).inc()
        self.runtime.errors += 1
        if where not in self._logged:
            self._logged.add(where)
            log.exception("agentrt runtime error in %s (logged once; requests go on)", where)

    def next_call_number(self) -> int:
        return next(self._calls)

    def upstream_failed(self) -> None:
        """The upstream could not be reached: it may come back restarted, with another KV pool."""
        self.capacity_stale = True

    # ------------------------------------------------------------------ user calls
    def arrive(self, endpoint: str, body: dict, ident: Identity) -> Call:
        now = self.clock()
        self.in_flight += 1
        self.starting += 1
        self.metrics.in_flight_now.set(self.in_flight)
        chat = endpoint.endswith("/chat/completions")
        segs = self.guard("blocks", chat_segments if chat else completion_segments, body)
        blocks = self.guard("blocks", prompt_blocks, body, segs, self.block_chars,
                             tenant_seed(ident.tenant)) if segs else None
        info = None
        agent = ident.agent
        if blocks is not None:
            info = self.guard("arrive", self._info, body, ident, blocks)
        if info is not None:
            agent = self.guard("identity", self.runtime.resolve_agent, info) or agent
            self.guard("observe", self.runtime.observe, ev.CallArrived(now, info))
            self.guard("template", self._keep_template, endpoint, body, segs, blocks, ident.tenant, agent)
        call = Call(info, ident, agent or "unknown", endpoint, now, blocks)
        if self.retain_tool_calls and agent:
            ident.retain_s = self.guard("retain", retain_for, self.runtime, body, ident, agent)
        if self.gate is not None:
            call.priority = 0        # a call the scheduler cannot rank still gets no client priority
            if info is not None:
                call.sched_info = self.guard("scheduler", self.scheduler.arrive, info, now)
            call.ticket = self.gate.enter(call.sched_info)
        return call

    def _info(self, body: dict, ident: Identity, blocks: PromptBlocks) -> ev.CallInfo:
        wf = self.runtime.workflow(ident.tenant, ident.key)
        index = wf.calls if wf is not None else 0  # as the connector counts
        # the expected output `fair` charges at arrival, before vLLM judges the value: one it
        # will refuse (below 1, not an integer) or past any context counts as unknown (0), so a
        # negative claim cannot buy a tenant precedence and a huge one cannot run the clocks up
        out = body.get("max_completion_tokens", body.get("max_tokens"))
        if isinstance(out, bool) or not isinstance(out, int) or not 1 <= out <= MAX_OUTPUT_TOKENS:
            out = 0
        return ev.CallInfo(next(self.request_ids), ident.key, ident.agent, ident.tenant, index, blocks.hash_ids,
                           len(blocks.hash_ids) * self.block_chars,
                           out, self.block_chars,
                           agent_explicit=ident.agent is not None)

    def _keep_template(self, endpoint, body, segs, blocks, tenant: str, agent: str) -> None:
        key = (tenant, agent)
        old = self.templates.get(key)
        n = min(self.max_anchor_blocks, len(blocks.hash_ids))
        if old is None or old.path != endpoint or old.blocks.hash_ids != blocks.hash_ids[:n]:
            self.templates.set(key, template(endpoint, body, segs, blocks, self.max_anchor_blocks))
        else:
            self.templates.touch(key)

    def answering(self, call: Call, first_byte: bool = True) -> None:
        """The first byte of the call's answer came back: the engine is past its prefill
        (`first_byte` False: the answer ended, whether or not a byte came first)."""
        if not call.answering:
            call.answering = True
            self.starting = max(0, self.starting - 1)
            if self.starting == 0:
                self.acts.wake.set()
            if first_byte and call.ticket is not None:
                self.gate.answering(call.ticket)

    def finish(self, call: Call, status: int | str, usage: dict | None, tool_call: bool = False) -> None:
        """The call's answer ended (`status`: the upstream's, or how it failed); `tool_call`: the
        answer ends in a tool call, so the workflow's next call waits on a tool."""
        now = self.clock()
        self.answering(call, first_byte=False)
        self.in_flight = max(0, self.in_flight - 1)
        self.metrics.in_flight_now.set(self.in_flight)
        tool_call = tool_call and status == 200
        if call.info is not None:
            self.guard("observe", self.runtime.observe, ev.CallFinished(now, call.info, None, tool_call))
        if call.ticket is not None:
            self.guard("gate", self.gate.finish, call.ticket, status, usage, tool_call)
        if status == 200:
            self.guard("cache", self._computed, call.ident.tenant, call.blocks, usage)
        if call.ident.end:
            self.end_workflow(call.ident.key, call.ident.tenant,
                              "call" if call.ident.workflow_source == "call" else "client")
        self.metrics.call(call.agent, call.endpoint, status, now - call.started, usage, call.ident.tenant,
                          tool_call)
        prompt, cached = usage_tokens(usage)
        self.recent.append({"workflow": call.ident.workflow, "agent": call.agent,
                            "agent_source": call.ident.agent_source, "tenant": call.ident.tenant,
                            "workflow_source": call.ident.workflow_source, "end": call.ident.end,
                            "endpoint": call.endpoint, "status": status, "prompt_tokens": prompt,
                            "cached_tokens": cached, "warmup": False, "priority": call.priority,
                            "tool_call": tool_call})

    def _computed(self, tenant: str, blocks: PromptBlocks | None, usage: dict | None) -> None:
        prompt, cached = usage_tokens(usage)
        if prompt is None:       # no usage (a stream without include_usage): about 4 chars a token
            prompt, cached = len(blocks.hash_ids) * self.block_chars // 4 if blocks else 0, 0
        out = usage.get("completion_tokens", 0) if isinstance(usage, dict) else 0
        self.cache.add_work(prompt - cached + (out if isinstance(out, int) else 0))
        if blocks is not None:
            self.cache.record(tenant, blocks.hash_ids[:-1])   # the last block may be partial

    def end_workflow(self, workflow: str, tenant: str = "default", reason: str = "client") -> None:
        """End a workflow; `workflow` is its tenant-scoped key (`auth.tenant_scoped`); `reason`
        is the metric's, the runtime and policy see a plain end."""
        now = self.clock()
        self._end_reason = reason                 # read by `_ended` (the guard catches everything)
        self.guard("observe", self.runtime.observe, ev.WorkflowEnded(now, workflow, tenant))
        self._end_reason = "client"
        self._sched_ended(workflow, tenant, now)

    def _sched_ended(self, workflow: str, tenant: str, now: float) -> None:
        if self.gate is not None:
            self.guard("scheduler", self.scheduler.workflow_ended, workflow, tenant, now)
            self.gate.kick()          # a held call may go now (its door opened)

    def _ended(self, wf, reason: str) -> None:
        """The runtime's `on_end`: count one workflow end (a plain "end" came by `end_workflow`,
        which tells the scheduler itself). One the runtime ended on its own (its caps, or the
        silence sweep) is over for the scheduler too, whose per-workflow state would otherwise
        grow with every workflow id a client never ends."""
        self.metrics.workflow_ended(wf.tenant, self._end_reason if reason == "end" else reason)
        if reason != "end":
            self._sched_ended(wf.id, wf.tenant, self.clock())

    # ------------------------------------------------------------------ introspection
    def state(self, limit: int = 200) -> dict:
        rt = self.runtime
        wfs = [{"id": w.id, "tenant": w.tenant, "path": list(w.path[-16:]), "running": w.running}
               for w in itertools.islice(rt.workflows.values(), limit)]
        agents = [{"tenant": p.tenant, "agent": p.name, "calls": p.calls, "anchor_blocks": len(p.anchor),
                   "anchor_workflows": p.anchor_workflows}
                  for p in itertools.islice(rt.agents.values(), limit)]
        sched = self.scheduler.stats()
        if self.gate is not None:
            sched["gate"] = self.gate.stats()
        return {"policy": self.policy_name, "scheduler": sched, "in_flight": self.in_flight,
                "starting": self.starting, "warming": self.acts.warming,
                "warmups_sent": self.acts.sent, "runtime_errors": rt.errors,
                "kv_capacity_tokens": self.cache.capacity_tokens, "engine_work_tokens": self.cache.work,
                "totals": self.metrics.totals(), "workflows": wfs, "agents": agents,
                "recent": list(self.recent)[-limit:]}

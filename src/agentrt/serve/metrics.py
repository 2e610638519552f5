"""Prometheus metrics of `agentrt serve`, labelled by policy, and per agent by tenant and agent.

Token counts come from the upstream's responses: `usage.prompt_tokens` and
`usage.prompt_tokens_details.cached_tokens` (vLLM with --enable-prompt-tokens-details). A streamed
response carries usage only when the client asked for it (`stream_options.include_usage`); the
server does not change the stream to get it, so such calls count in `agentrt_requests_total` and
`agentrt_requests_without_usage_total` but not in the token counters. Hit rates are cached over
prompt tokens of user calls, warm-ups excluded. Per-agent series carry the tenant: two tenants'
agents of the same name are two series, so one tenant's traffic never moves another's values.
Agent and tenant label values are capped (`max_agents` (tenant, agent) pairs and `max_tenants`
tenants, then "other"; one tenant names at most a quarter of the agent labels once a second
tenant calls, or from the start where the keys file names two or more, so its invented ids
cannot turn another tenant's agents into "other"; a server with one tenant keeps all of them) so
a framework that invents an id per call, or
(without `--auth`) a client that sends a new `X-Tenant-Id` each time, cannot blow up the series
count; under `--auth` tenants are the keys file's. Workflow ends (`agentrt_workflows_ended_total`)
are counted by reason: "client" (`X-Workflow-End` or the end route), "call" (a call that named
no workflow was one), "cap" (ended idle to stay within the runtime's caps on open workflows) and
"silent" (the silence sweep). Each server owns its registry, so several can live in one process
(tests).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

__all__ = ["ServeMetrics", "CONTENT_TYPE_LATEST", "END_REASONS", "LabelCap"]
END_REASONS = ("client", "call", "cap", "silent")


class LabelCap:
    """At most `limit` distinct values of one label (with a key: distinct (key, value) pairs),
    and, once a second key (tenant) has asked, or from the start when `shared`, at most `per_key`
    of them for one key; values first seen past either read "other". A server with one tenant
    (every server without `--auth`) keeps all `limit` for it."""

    __slots__ = ("limit", "per_key", "shared", "seen", "_by_key")

    def __init__(self, limit: int, per_key: int | None = None, shared: bool = False) -> None:
        self.limit = limit
        self.per_key = per_key
        self.shared = shared
        self.seen: set = set()
        self._by_key: dict[str, int] = {}        # key -> values it added (at most `limit` keys)

    def __call__(self, value: str, key: str | None = None) -> str:
        k = key or ""
        pair = (k, value) if self.per_key is not None else value
        if pair in self.seen:
            return value
        if len(self.seen) >= self.limit:
            return "other"
        if self.per_key is not None:
            n = self._by_key.get(k, 0)
            if n >= self.per_key and (self.shared or len(self._by_key) > 1 or k not in self._by_key):
                return "other"
            self._by_key[k] = n + 1
        self.seen.add(pair)
        return value


class ServeMetrics:
    def __init__(self, policy: str, max_agents: int = 256, max_tenants: int = 256,
                 known_tenants: int = 0) -> None:
        """`known_tenants`: how many tenants the keys file names (0 without `--auth`)."""
        self.policy = policy
        self.max_agents = max_agents
        # one tenant may name at most a quarter of the agent labels: with --auth, another
        # tenant's agents keep their own series however many agent ids one tenant invents,
        # even one that called first
        self._agents = LabelCap(max_agents, max(1, max_agents // 4), shared=known_tenants >= 2)
        self.tenant_label = LabelCap(max_tenants)
        self._tokens: dict[tuple[str, str], list[int]] = {}      # (tenant, agent) labels -> [prompt, cached]
        self._total = [0, 0]
        r = self.registry = CollectorRegistry()
        pa = ["policy", "tenant", "agent"]
        self.requests = Counter("agentrt_requests", "Calls forwarded to the upstream, by outcome",
                                ["policy", "tenant", "agent", "endpoint", "status"], registry=r)
        self.no_usage = Counter("agentrt_requests_without_usage", "Successful calls whose response "
                                "had no usage (streams without include_usage)", pa, registry=r)
        self.prompt_tokens = Counter("agentrt_prompt_tokens", "Prompt tokens of user calls", pa, registry=r)
        self.tool_calls = Counter("agentrt_tool_calls", "Successful calls whose answer ends in a tool "
                                  "call (finish_reason tool_calls or function_call)", pa, registry=r)
        self.cached_tokens = Counter("agentrt_cached_tokens", "Prompt tokens of user calls served "
                                     "from the engine's prefix cache", pa, registry=r)
        self.agent_hit_rate = Gauge("agentrt_agent_hit_rate", "Cached / prompt tokens of an agent's "
                                    "calls", pa, registry=r)
        self.hit_rate = Gauge("agentrt_hit_rate", "Cached / prompt tokens of all user calls",
                              ["policy"], registry=r)
        self.warmups = Counter("agentrt_warmups", "Warm-up requests sent, by outcome",
                               ["policy", "tenant", "agent", "outcome"], registry=r)
        self.warmup_prompt_tokens = Counter("agentrt_warmup_prompt_tokens", "Prompt tokens of "
                                            "warm-up requests", pa, registry=r)
        self.warmup_computed_tokens = Counter("agentrt_warmup_computed_tokens", "Prompt tokens the "
                                              "engine prefilled for warm-ups (their cost: prompt "
                                              "minus cached)", pa, registry=r)
        self.actions_ignored = Counter("agentrt_actions_ignored", "Policy actions the server cannot "
                                       "carry out (e.g. host-tier prefetch)", ["policy", "kind"], registry=r)
        self.runtime_errors = Counter("agentrt_runtime_errors", "Exceptions inside the runtime or "
                                      "policy (the request went on)", ["policy", "where"], registry=r)
        self.upstream_errors = Counter("agentrt_upstream_errors", "Upstream answers with status >= 400 "
                                       "or no answer (status 'unreachable')", ["policy", "status"], registry=r)
        pt = ["policy", "tenant"]
        self.tenant_prompt_tokens = Counter("agentrt_tenant_prompt_tokens", "Prompt tokens of a "
                                            "tenant's user calls", pt, registry=r)
        self.tenant_cached_tokens = Counter("agentrt_tenant_cached_tokens", "Prompt tokens of a "
                                            "tenant's user calls served from the engine's prefix "
                                            "cache", pt, registry=r)
        self.workflows_ended = Counter("agentrt_workflows_ended", "Workflows ended, by reason: "
                                       "client (X-Workflow-End or the end route), call (a call "
                                       "that named no workflow), cap (ended idle to stay within "
                                       "the open-workflow caps), silent (the silence sweep)",
                                       ["policy", "tenant", "reason"], registry=r)
        self.workflows_open = Gauge("agentrt_workflows_open", "Workflows the runtime holds open",
                                    ["policy"], registry=r)
        self.in_flight = Gauge("agentrt_requests_in_flight", "User calls in flight", ["policy"], registry=r)
        self.latency = Histogram("agentrt_request_seconds", "Time from request to the end of the "
                                 "response", ["policy", "endpoint"], registry=r,
                                 buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120))
        self.hit_rate.labels(policy).set(0.0)
        self.in_flight_now = self.in_flight.labels(policy)
        self.in_flight_now.set(0)
        self._children: dict = {}        # (tenant, agent label, endpoint, status) -> labelled series
        self._tenant_children: dict = {}  # tenant label -> (prompt, cached) series

    def agent_label(self, agent: str | None, tenant: str | None = None) -> str:
        return self._agents(agent or "unknown", tenant)

    def labels_of(self, agent: str | None, tenant: str | None) -> tuple[str, str]:
        """(tenant label, agent label) of a call's per-agent series."""
        return self.tenant_label(tenant or "default"), self.agent_label(agent, tenant or "default")

    def workflow_ended(self, tenant: str, reason: str) -> None:
        r = reason if reason in END_REASONS else "other"
        self.workflows_ended.labels(self.policy, self.tenant_label(tenant), r).inc()

    def call(self, agent: str | None, endpoint: str, status: int | str, seconds: float,
             usage: dict | None, tenant: str = "default", tool_call: bool = False) -> None:
        t, a = self.labels_of(agent, tenant)
        p = self.policy
        key = (t, a, endpoint, status)
        ch = self._children.get(key)
        if ch is None:                   # label lookups are the costly part: once per series
            if len(self._children) > 4 * self.max_agents * 8:
                self._children.clear()
            ch = self._children[key] = (
                self.requests.labels(p, t, a, endpoint, str(status)), self.latency.labels(p, endpoint),
                self.no_usage.labels(p, t, a), self.prompt_tokens.labels(p, t, a),
                self.cached_tokens.labels(p, t, a), self.agent_hit_rate.labels(p, t, a),
                self.hit_rate.labels(p), self.tool_calls.labels(p, t, a))
        ch[0].inc()
        ch[1].observe(seconds)
        if status != 200:
            return
        if tool_call:
            ch[7].inc()
        prompt, cached = usage_tokens(usage)
        if prompt is None:
            ch[2].inc()
            return
        ch[3].inc(prompt)
        ch[4].inc(cached)
        self._tenant_tokens(t, prompt, cached)
        tok = self._tokens.setdefault((t, a), [0, 0])
        tok[0] += prompt
        tok[1] += cached
        self._total[0] += prompt
        self._total[1] += cached
        if tok[0]:
            ch[5].set(tok[1] / tok[0])
        if self._total[0]:
            ch[6].set(self._total[1] / self._total[0])

    def _tenant_tokens(self, t: str, prompt: int, cached: int) -> None:
        """`t`: the tenant's label (`labels_of`)."""
        ch = self._tenant_children.get(t)
        if ch is None:                   # bounded by the tenant cap, so never cleared
            ch = self._tenant_children[t] = (self.tenant_prompt_tokens.labels(self.policy, t),
                                             self.tenant_cached_tokens.labels(self.policy, t))
        ch[0].inc(prompt)
        ch[1].inc(cached)

    def warmup(self, agent: str, outcome: str, usage: dict | None, tenant: str | None = None) -> None:
        t, a = self.labels_of(agent, tenant)
        self.warmups.labels(self.policy, t, a, outcome).inc()
        prompt, cached = usage_tokens(usage)
        if prompt is not None:
            self.warmup_prompt_tokens.labels(self.policy, t, a).inc(prompt)
            self.warmup_computed_tokens.labels(self.policy, t, a).inc(max(0, prompt - cached))

    def totals(self) -> dict:
        prompt, cached = self._total
        return {"prompt_tokens": prompt, "cached_tokens": cached,
                "hit_rate": cached / prompt if prompt else 0.0}

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


def usage_tokens(usage: dict | None) -> tuple[int | None, int]:
    """(prompt tokens, cached tokens) of an OpenAI `usage` object; (None, 0) if absent."""
    if not isinstance(usage, dict) or not isinstance(usage.get("prompt_tokens"), int):
        return None, 0
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return usage["prompt_tokens"], cached if isinstance(cached, int) else 0


class GateMetrics:
    """The admission gate's series (`gate.py`), in the server's registry, labelled by scheduler:
    calls held now, how long each call waited in the gate, why each left it (`reason`: room,
    backfill, aged, hold_bound, bound, idle, unmeasured, oversize, unranked: released to the
    engine; gone: its client left first) and calls refused because the gate was full (429)."""

    REASONS = ("room", "backfill", "aged", "hold_bound", "bound", "idle", "unmeasured", "oversize",
               "unranked", "gone")

    def __init__(self, registry: CollectorRegistry, scheduler: str, tenant_label: LabelCap) -> None:
        self.scheduler = scheduler
        self.tenant_label = tenant_label
        self.held = Gauge("agentrt_gate_held", "Calls held in the admission gate now", ["scheduler"],
                          registry=registry).labels(scheduler)
        self.hold = Histogram("agentrt_gate_hold_seconds", "Time a call waited in the admission gate "
                              "(released or gone)", ["scheduler"], registry=registry,
                              buckets=(0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
                              ).labels(scheduler)
        releases = Counter("agentrt_gate_releases", "Calls that left the admission gate, by reason",
                           ["scheduler", "reason"], registry=registry)
        self.releases = {r: releases.labels(scheduler, r) for r in self.REASONS}
        self._rejected = Counter("agentrt_gate_rejected", "Calls refused with 429: the gate held as "
                                 "many as it may (in all or for the tenant)", ["scheduler", "tenant"],
                                 registry=registry)

    def rejected(self, tenant: str) -> None:
        self._rejected.labels(self.scheduler, self.tenant_label(tenant)).inc()

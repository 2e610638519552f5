"""The connector's state as Prometheus metrics on vLLM's own `/metrics`, through vLLM 0.32's KV
connector stats path.

How the numbers travel (vLLM 0.32.0, `vllm/distributed/kv_transfer/kv_connector/v1/metrics.py`):
- scheduler process: after every engine step vLLM's scheduler calls the connector's
  `get_kv_connector_stats()`; `StatsReporter.take` turns the hosted runtime's cumulative
  `stats()` into what changed since the last report (counter increments, gauges that moved) or
  None when nothing did. vLLM sends it to the API server inside `SchedulerStats`
  (`kv_connector_stats`, a plain dict: `AgentRTStats.data`).
- API server: `PrometheusStatLogger` builds the connector class's `build_prom_metrics` once
  (`AgentRTPromMetrics`, the metrics below) and hands every step's dict to its `observe`; vLLM's
  log line ("KV Transfer metrics: ...", every 10 s) reads `AgentRTStats.reduce`.
Assumptions: one report per step and engine, nothing dropped in between (vLLM sends scheduler
stats unless `--disable-log-stats`, which turns these metrics off with vLLM's own); worker
connectors report nothing. After a runtime failure the counters stop where they were and
`runtime_failed` reads 1. Every metric carries vLLM's `model_name` and `engine` labels and the
connector's `policy`; the one other label each may have takes a fixed set of values, all of them
created at start-up (at 0), so a series never appears late or unbounded.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from vllm.distributed.kv_transfer.kv_connector.v1.metrics import (
    KVConnectorPromMetrics,
    KVConnectorStats,
)

log = logging.getLogger("vllm.agentrt")   # under vLLM's logger: its handler and level
PREFIX = "agentrt_connector_"
COUNTERS, GAUGES = "counters", "gauges"
HINT_REASONS = ("foreign", "unknown_type", "unknown_version", "malformed", "duplicate", "bad_fields")
# the retention floor's outcomes (`runtime/retention.py`), read from the policy's `retain_*` stats
from agentrt.runtime.retention import BLOCK_EVENTS, HINT_OUTCOMES, REJECT_REASONS  # noqa: E402


@dataclass(frozen=True, slots=True)
class MetricDef:
    """One metric family. `sources[i]` computes the value for `values[i]` (or the unlabelled
    value) from the hosted runtime's `stats()` dict: cumulative for a counter, current for a gauge."""
    short: str                  # name without PREFIX (and without `_total` for a counter)
    kind: str                   # "counter" | "gauge"
    doc: str
    label: str | None = None
    values: tuple[str, ...] = ()
    sources: tuple[Any, ...] = ()

    @property
    def name(self) -> str:
        return PREFIX + self.short

    def keys(self) -> list[str]:
        return [self.short] if self.label is None else [f"{self.short}/{v}" for v in self.values]


def _k(key: str):
    return lambda s: s.get(key, 0)


METRICS: tuple[MetricDef, ...] = (
    MetricDef("runtime_failed", "gauge", "1 once the hosted runtime failed and the connector fell "
              "back to vLLM's own LRU order for good, else 0",
              sources=(lambda s: int(bool(s.get("failed"))),)),
    MetricDef("requests", "counter", "Requests the runtime saw arrive (warm-ups excluded)",
              sources=(_k("arrived"),)),
    MetricDef("warmups", "counter", "Warm-up requests the runtime saw arrive (never learned from)",
              sources=(_k("warmup_requests"),)),
    MetricDef("evictions", "counter", "Cached blocks that left vLLM's GPU prefix cache, by reason: "
              "reuse (vLLM reused the block), demoted (reused, its copy kept in the host tier), "
              "reset (prefix cache reset)", "reason", ("reuse", "demoted", "reset"),
              (_k("evicted"), _k("demoted"), _k("reset_evicted"))),
    MetricDef("workflows_ended", "counter", "Workflows ended, by reason: client (a workflow end "
              "said by the request), call (a request that named no workflow), cap (over the caps "
              "on open workflows), silent (the silence sweep)", "reason", ("client", "call", "cap", "silent"),
              (lambda s: s.get("workflows_ended", 0) - s.get("workflows_ended_call", 0),
               _k("workflows_ended_call"), _k("workflows_capped"), _k("workflows_silenced"))),
    MetricDef("workflows_open", "gauge", "Workflows the runtime holds open", sources=(_k("live_workflows"),)),
    MetricDef("actions", "counter", "Actions the policy emitted, by action", "action",
              ("warmup", "prefetch"), (_k("warmup_actions"), _k("prefetch_actions"))),
    MetricDef("actions_ignored", "counter", "Policy actions the connector cannot carry out: every "
              "warm-up (a connector sends no requests), prefetches without a host tier", "action",
              ("warmup", "prefetch"), (_k("warmup_actions"), _k("prefetch_ignored"))),
    MetricDef("hint_actions", "counter", "agentrt kv_hints actions read", sources=(_k("hints_actions"),)),
    MetricDef("hints_ignored", "counter", "kv_hints actions and identity fields ignored, by reason",
              "reason", HINT_REASONS, tuple(_k("hints_" + r) for r in HINT_REASONS)),
    MetricDef("retain_hints", "counter", "Standard KV hints (kv.retain, vllm.set_priority) applied, "
              "by outcome: accepted, clipped (the retention budget or the tenant's share took only "
              "a prefix), recorded (a set_priority claim that retains nothing: value <= 0 or cleared)",
              "outcome", HINT_OUTCOMES, tuple(_k("policy_retain_" + o) for o in HINT_OUTCOMES)),
    MetricDef("retain_rejected", "counter", "Standard KV hints refused, by reason: malformed, "
              "unknown_version, too_many (over 16 actions or 128 directives), off (retain_budget 0), "
              "empty (no cached block in range), aborted (the request did not finish), over_budget, "
              "over_tenant_share, too_many_owners (16 on one block), stale_revision, conflict",
              "reason", REJECT_REASONS, tuple(_k("policy_retain_rejected_" + r) for r in REJECT_REASONS)),
    MetricDef("retained_block_events", "counter", "Blocks leaving retention, by event: expired "
              "(deadline), released (by their owner or its workflow's end), revoked (their tenant "
              "over its share of the budget), evicted (vLLM took them anyway: nothing else was free)",
              "event", BLOCK_EVENTS, tuple(_k("policy_retain_" + e) for e in BLOCK_EVENTS)),
    MetricDef("retained_blocks", "gauge", "Blocks retained now, ranked after every unretained block",
              sources=(_k("policy_retained_blocks"),)),
    MetricDef("host_tier_blocks", "counter", "Host-tier block operations: hit (loaded for a "
              "request), prefetched, saved, loaded (hits and prefetches), dropped (evicted from "
              "the host), skipped (an eviction not worth a host slot)", "op",
              ("hit", "prefetched", "saved", "loaded", "dropped", "skipped"),
              (_k("host_hit_blocks"), _k("prefetched_blocks"), _k("host_saved"), _k("host_loaded"),
               _k("host_dropped"), _k("host_skipped"))),
    MetricDef("preemptions", "counter", "Requests vLLM preempted that the connector saw (their "
              "completed blocks then enter its mirror, ranked by the policy)", sources=(_k("preempted"),)),
    MetricDef("preempted_blocks", "counter", "Cached blocks of preempted requests the connector "
              "mirrored, tagged with their request's thread", sources=(_k("preempted_blocks"),)),
    MetricDef("mirrored_blocks", "gauge", "GPU-cached blocks the connector mirrors",
              sources=(_k("mirrored"),)),
    MetricDef("host_blocks", "gauge", "Blocks held in the host tier", sources=(_k("host_resident"),)),
    MetricDef("reorders", "counter", "Times the connector put vLLM's free queue in policy order",
              sources=(_k("reorders"),)),
    MetricDef("reorder_seconds", "counter", "Time spent putting vLLM's free queue in policy order",
              sources=(_k("reorder_s"),)),
    MetricDef("forecasts_overruled", "gauge", "Agents whose next-call forecasts PBKV-TA now takes "
              "from its online model because the trained predictor's were decisively worse (a "
              "predictor that does not fit this deployment); 0 for other policies",
              sources=(_k("policy_forecasts_overruled"),)),
    MetricDef("tenants_over_share", "gauge", "Tenants now holding more than their guaranteed share "
              "of the KV pool, whose blocks are evicted first (with tenant_shares; 0 without)",
              sources=(_k("policy_tenants_over_share"),)),
    MetricDef("tenants_over_level", "gauge", "Of those, tenants also over the max-min level (what "
              "tenants under their guarantee leave unused, split by weight), evicted before the "
              "others (with tenant_shares; 0 without)",
              sources=(_k("policy_tenants_over_level"),)),
    MetricDef("safety_net_fallback", "gauge", "1 while the runtime's LRU safety net ranks blocks "
              "by LRU because the policy measurably loses to a sampled shadow LRU, else 0",
              sources=(_k("net_fallback"),)),
    MetricDef("safety_net_fallbacks", "counter", "Times the LRU safety net fell back to LRU order",
              sources=(_k("net_fallbacks"),)),
    MetricDef("safety_net_fallback_seconds", "counter", "Time the LRU safety net has spent in LRU order",
              sources=(_k("net_fallback_s"),)),
    MetricDef("runtime_seconds", "counter", "Time spent in the runtime's observe, act and sweep "
              "(in vLLM's scheduler process; reordering not included)", sources=(_k("runtime_s"),)),
    MetricDef("hook_seconds", "counter", "Time spent in all of the connector's scheduler-side hooks "
              "(arrivals, lookups, allocations, finishes, the per-step work with its reorders and "
              "actions, this report): the connector's whole cost in vLLM's scheduler process; "
              "divided by steps, its cost per step", sources=(_k("hook_s"),)),
    MetricDef("steps", "counter", "Scheduler steps the connector saw", sources=(_k("steps"),)),
)


def totals(stats: dict) -> dict[str, dict[str, float]]:
    """{"counters": {key: cumulative}, "gauges": {key: current}} from `HostedRuntime.stats()`."""
    out: dict[str, dict[str, float]] = {COUNTERS: {}, GAUGES: {}}
    for m in METRICS:
        group = out[COUNTERS if m.kind == "counter" else GAUGES]
        for key, src in zip(m.keys(), m.sources):
            group[key] = src(stats)
    return out


@dataclass
class AgentRTStats(KVConnectorStats):
    """What changed in one interval: counter increments and the latest gauge values."""

    def __post_init__(self) -> None:
        self.data.setdefault(COUNTERS, {})
        self.data.setdefault(GAUGES, {})

    def reset(self) -> None:
        self.data = {COUNTERS: {}, GAUGES: {}}

    def aggregate(self, other: KVConnectorStats) -> KVConnectorStats:
        if isinstance(other, AgentRTStats):      # `other` is the later interval
            c = self.data[COUNTERS]
            for k, v in other.data[COUNTERS].items():
                c[k] = c.get(k, 0) + v
            self.data[GAUGES].update(other.data[GAUGES])
        return self

    def reduce(self) -> dict[str, int | float]:
        out: dict[str, int | float] = {k: round(v, 4) for k, v in self.data[COUNTERS].items() if v}
        out.update(self.data[GAUGES])
        return out

    def is_empty(self) -> bool:
        return not self.data[COUNTERS] and not self.data[GAUGES]


QUIET_S = 1.0   # with only the timing moved, a report at most this often (seconds)


@dataclass(slots=True)
class StatsReporter:
    """Scheduler side: each call reports what moved since the previous one (all gauges at first).

    vLLM asks every step. `due` keeps that cheap: the stats are built only when the hosted
    runtime's change marker moved (an event, a count, a reorder) or `QUIET_S` has passed, so a
    decode step that changed nothing costs a tuple comparison, and the step and hook-time
    counters, which move every step, ride along with other reports or go once a second. While
    requests are in flight a change waits until `interval` has passed since the last report
    (each report is a message vLLM's API server processes beside the tokens it streams; the
    counters are cumulative, so a later report carries what a skipped one would have); once
    none is (`idle`) it goes at once, so /metrics is current when a run ends."""
    last: dict | None = None
    broken: bool = False        # set by the connector once `take` raised: metrics stay frozen
    marker: object = None
    at: float = float("-inf")
    interval: float = 0.0       # the connector's `stats_interval_s`

    def due(self, marker: object, now: float, idle: bool = True) -> bool:
        since = now - self.at
        if marker == self.marker and since < QUIET_S:
            return False
        if marker != self.marker and not idle and since < self.interval:
            return False
        self.marker, self.at = marker, now
        return True

    def take(self, stats: dict) -> AgentRTStats | None:
        if self.broken:
            return None
        now = totals(stats)
        last = self.last or {COUNTERS: {}, GAUGES: {}}
        counters = {k: v - last[COUNTERS].get(k, 0) for k, v in now[COUNTERS].items()
                    if v != last[COUNTERS].get(k, 0)}
        gauges = {k: v for k, v in now[GAUGES].items()
                  if self.last is None or v != last[GAUGES].get(k)}
        self.last = now
        if not counters and not gauges:
            return None
        return AgentRTStats(data={COUNTERS: counters, GAUGES: gauges})


def _unregister_previous(counter_cls) -> None:
    """A second stat logger in one process (tests) re-creates the metrics: drop the old ones from
    prometheus_client's global registry first, as vLLM does for its own (`vllm:` names)."""
    from prometheus_client import REGISTRY, Counter
    if counter_cls is not Counter:
        return
    for c in list(REGISTRY._collector_to_names):
        if getattr(c, "_name", "").startswith(PREFIX):
            REGISTRY.unregister(c)


class AgentRTPromMetrics(KVConnectorPromMetrics):
    """API server side: the metric families of `METRICS`, one child per engine and label value."""

    def __init__(self, vllm_config, metric_types: dict, labelnames: list[str],
                 per_engine_labelvalues: dict[int, list[object]], policy: str) -> None:
        super().__init__(vllm_config, metric_types, labelnames, per_engine_labelvalues)
        _unregister_previous(self._counter_cls)
        self.warned = False
        self.children: dict[tuple[int, str], Any] = {}
        for m in METRICS:
            names = list(labelnames) + ["policy"] + ([m.label] if m.label else [])
            if m.kind == "counter":
                fam = self._counter_cls(name=m.name, documentation=m.doc, labelnames=names)
            else:
                fam = self._gauge_cls(name=m.name, documentation=m.doc, labelnames=names,
                                      multiprocess_mode="mostrecent")
            for idx, values in per_engine_labelvalues.items():
                base = list(values) + [policy]
                if m.label is None:
                    self.children[(idx, m.short)] = fam.labels(*base)
                else:
                    for v, key in zip(m.values, m.keys()):
                        self.children[(idx, key)] = fam.labels(*base, v)

    def observe(self, transfer_stats_data: dict[str, Any], engine_idx: int = 0) -> None:
        # runs in vLLM's output loop: a bad report is dropped, never raised
        try:
            for key, inc in (transfer_stats_data.get(COUNTERS) or {}).items():
                child = self.children.get((engine_idx, key))
                if child is not None and inc > 0:
                    child.inc(inc)
            for key, value in (transfer_stats_data.get(GAUGES) or {}).items():
                child = self.children.get((engine_idx, key))
                if child is not None:
                    child.set(value)
        except Exception as e:  # noqa: BLE001
            if not self.warned:
                self.warned = True
                log.warning("agentrt: a connector stats report was dropped (%r)", e)


def policy_of(vllm_config) -> str:
    """The `policy` label: the connector's configured policy (bad settings fail the engine
    elsewhere; here they only name the label)."""
    from agentrt.vllm.config import ConnectorConfig
    extra = getattr(vllm_config.kv_transfer_config, "kv_connector_extra_config", None) or {}
    try:
        return str(ConnectorConfig.from_extra(extra)[0].policy)[:64]
    except Exception:  # noqa: BLE001
        return str(extra.get("policy", "lru"))[:64]

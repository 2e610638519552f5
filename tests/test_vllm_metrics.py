"""The connector's Prometheus metrics (`agentrt.vllm.prom`) through vLLM's KV connector stats path.

Fast tests build the metrics through vLLM's own `KVConnectorProm` (the class vLLM's
`PrometheusStatLogger` uses; it resolves the connector class by name and calls its
`build_prom_metrics`) into a private registry, and drive the real connector on vLLM's real
`BlockPool`; the slow one scrapes a real vLLM server's /metrics (the session's pbkv-lae
connector server, shared with the identity tests) after a few requests.
"""

from __future__ import annotations

import json
import os
import time
from types import SimpleNamespace

import pytest

from vllm_support import connector_server, requires_vllm

UNIQ = f"{os.getpid()}-{time.time_ns()}"


# ------------------------------------------------------------------ helpers (also test_dashboard's)
def exporter(policy: str = "cachesage", engines: tuple[int, ...] = (0,)):
    """(vLLM's KVConnectorProm for the agentrt connector, its private registry)."""
    from functools import partial

    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
    from vllm.config import KVTransferConfig
    from vllm.distributed.kv_transfer.kv_connector.v1.metrics import KVConnectorProm

    reg = CollectorRegistry()

    class Prom(KVConnectorProm):
        _gauge_cls = partial(Gauge, registry=reg)
        _counter_cls = partial(Counter, registry=reg)
        _histogram_cls = partial(Histogram, registry=reg)

    kv = KVTransferConfig(kv_connector="AgentRTConnector", kv_role="kv_both",
                          kv_connector_module_path="agentrt.vllm.connector",
                          kv_connector_extra_config={"policy": policy})
    prom = Prom(SimpleNamespace(kv_transfer_config=kv), ["model_name", "engine"],
                {i: ["m", str(i)] for i in engines})
    assert prom.prom_metrics is not None, "vLLM did not build the connector's metrics"
    return prom, reg


def samples(text: str, prefix: str = "agentrt_connector_") -> dict[tuple, float]:
    """{(sample name, sorted label items): value} of the samples whose name starts with `prefix`."""
    from prometheus_client.parser import text_string_to_metric_families
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text) for s in f.samples if s.name.startswith(prefix)}


def value(smp: dict[tuple, float], name: str, **labels: str) -> float:
    """The sum over the samples of `name` whose labels include `labels`."""
    want = set(labels.items())
    return sum(v for (n, lab), v in smp.items() if n == name and want <= set(lab))


def _text(reg) -> str:
    from prometheus_client import generate_latest
    return generate_latest(reg).decode()


# ------------------------------------------------------------------ reports and their aggregation
@requires_vllm
def test_reporter_sends_what_changed_and_nothing_when_nothing_did():
    from agentrt.vllm.prom import StatsReporter
    r = StatsReporter()
    first = r.take({"arrived": 2, "evicted": 0, "failed": False, "live_workflows": 1})
    assert first.data["counters"] == {"requests": 2}
    assert first.data["gauges"]["runtime_failed"] == 0 and first.data["gauges"]["workflows_open"] == 1
    assert r.take({"arrived": 2, "failed": False, "live_workflows": 1}) is None
    nxt = r.take({"arrived": 5, "evicted": 3, "workflows_ended": 2, "workflows_ended_call": 1,
                  "failed": True, "live_workflows": 1})
    assert nxt.data == {"counters": {"requests": 3, "evictions/reuse": 3, "workflows_ended/client": 1,
                                     "workflows_ended/call": 1}, "gauges": {"runtime_failed": 1}}


@requires_vllm
def test_reports_wait_for_the_interval_while_requests_are_in_flight():
    """`stats_interval_s`: a change is held while requests are in flight and less than the
    interval has passed since the last report; it goes at once when nothing is in flight; with
    nothing changed, only once `QUIET_S` has passed (the timing counters)."""
    from agentrt.vllm.prom import QUIET_S, StatsReporter
    r = StatsReporter(interval=0.5)
    assert r.due((1,), 0.0, idle=False)                # the first report goes
    assert not r.due((2,), 0.2, idle=False)            # changed, busy, too soon
    assert r.due((2,), 0.2, idle=True)                 # changed, nothing in flight: at once
    assert not r.due((3,), 0.4, idle=False)
    assert r.due((3,), 0.75, idle=False)               # the interval has passed
    assert not r.due((3,), 0.8, idle=True)             # nothing changed
    assert r.due((3,), 0.75 + QUIET_S, idle=False)     # the timing counters, once in QUIET_S
    every = StatsReporter(interval=0.0)                # 0: every step something changed
    assert every.due((1,), 0.0, idle=False) and every.due((2,), 0.001, idle=False)


@requires_vllm
def test_vllm_logging_aggregates_intervals():
    """vLLM's periodic log line ("KV Transfer metrics: ...") sums the steps' reports."""
    from vllm.distributed.kv_transfer.kv_connector.v1.metrics import KVConnectorLogging
    from agentrt.vllm.connector import AgentRTConnector
    from agentrt.vllm.prom import StatsReporter
    prom, _ = exporter()
    r = StatsReporter()
    logging = KVConnectorLogging(prom.prom_metrics._kv_transfer_config)
    assert logging.connector_cls is AgentRTConnector
    logging.observe(r.take({"arrived": 1, "failed": False}).to_dict())
    logging.observe(r.take({"arrived": 4, "hints_foreign": 2, "failed": True}).to_dict())
    lines = []
    logging.log(lambda fmt, s: lines.append(s))
    assert lines and "requests=4" in lines[0] and "hints_ignored/foreign=2" in lines[0]
    assert "runtime_failed=1" in lines[0]
    assert AgentRTConnector.build_kv_connector_stats(None).is_empty()


# ------------------------------------------------------------------ the exported families
@requires_vllm
def test_every_metric_is_exported_at_zero_with_bounded_labels():
    from agentrt.vllm.prom import METRICS
    _, reg = exporter("pbkv-lae", engines=(0, 1))
    smp = samples(_text(reg))
    for m in METRICS:
        name = m.name + ("_total" if m.kind == "counter" else "")
        for engine in ("0", "1"):
            for v in m.values or (None,):
                labels = {"model_name": "m", "engine": engine, "policy": "pbkv-lae"}
                if v is not None:
                    labels[m.label] = v
                assert (name, tuple(sorted(labels.items()))) in smp, (name, labels)
    assert {v for (n, _), v in smp.items() if not n.endswith("_created")} == {0.0}
    names = {n for n, _ in smp}
    assert {"agentrt_connector_runtime_failed", "agentrt_connector_evictions_total",
            "agentrt_connector_workflows_ended_total", "agentrt_connector_warmups_total",
            "agentrt_connector_hints_ignored_total"} <= names
    # a second exporter in one process (vLLM re-creating its stat logger) does not collide
    exporter("pbkv-lae")
    from agentrt.vllm.prom import AgentRTPromMetrics
    from prometheus_client import Counter, Gauge, Histogram
    types = {Gauge: Gauge, Counter: Counter, Histogram: Histogram}
    for _ in range(2):
        AgentRTPromMetrics(SimpleNamespace(kv_transfer_config=None), types, ["model_name", "engine"],
                           {0: ["m", "0"]}, "lru")


@requires_vllm
def test_connector_stats_reach_the_metrics():
    """The real connector on vLLM's real BlockPool: what its scheduler-side stats report, once
    observed by the exporter, equals the hosted runtime's own totals; after a failure the
    fallback state reads 1 and the counters stay where they were."""
    from test_vllm_connector import _batch, _connector, _requests
    conn, pool = _connector("cachesage", 64, sweep_interval_s=0.0, max_workflows_per_tenant=2)
    prom, reg = exporter("cachesage")
    h = conn.hosted
    for r in _requests(5, 60):
        _batch(pool, conn, [r])
        st = conn.get_kv_connector_stats()        # vLLM asks after every step
        if st is not None:
            prom.observe(st.to_dict(), 0)
    assert conn.get_kv_connector_stats() is None                # nothing moved since
    tot, smp = h.stats(), samples(_text(reg))
    assert value(smp, "agentrt_connector_requests_total") == tot["arrived"] == 60
    assert value(smp, "agentrt_connector_evictions_total", reason="reuse") == tot["evicted"] > 0
    ended = "agentrt_connector_workflows_ended_total"
    assert value(smp, ended, reason="cap") == tot["workflows_capped"] > 0
    assert value(smp, ended, reason="client") == tot["workflows_ended"] > 0     # all named theirs
    assert value(smp, ended, reason="call") == tot["workflows_ended_call"] == 0
    assert value(smp, "agentrt_connector_workflows_open") == tot["live_workflows"]
    assert value(smp, "agentrt_connector_mirrored_blocks") == tot["mirrored"] > 0
    assert value(smp, "agentrt_connector_runtime_failed", policy="cachesage") == 0
    conn.reset_cache()                                          # vLLM's prefix cache reset
    prom.observe(conn.get_kv_connector_stats().to_dict(), 0)
    smp = samples(_text(reg))
    assert value(smp, "agentrt_connector_evictions_total", reason="reset") == tot["mirrored"]
    assert value(smp, "agentrt_connector_mirrored_blocks") == 0
    h.fail("test", RuntimeError("injected"))
    _batch(pool, conn, _requests(6, 2))
    prom.observe(conn.get_kv_connector_stats().to_dict(), 0)
    after = samples(_text(reg))
    assert value(after, "agentrt_connector_runtime_failed") == 1
    assert value(after, "agentrt_connector_requests_total") == 60


@requires_vllm
def test_metrics_failure_never_reaches_vllm():
    from test_vllm_connector import _connector
    conn, _ = _connector("lru", 16)
    conn.hosted.stats = lambda: 1 / 0
    assert conn.get_kv_connector_stats() is None and conn.get_kv_connector_stats() is None
    assert not conn.hosted.failed                   # serving is not touched by a metrics bug
    # API server side: a bad report is dropped, families that cannot be built are left out
    prom, reg = exporter()
    prom.observe({"counters": {"requests": "x"}, "gauges": {"runtime_failed": 1}}, 0)
    prom.observe({"counters": {"requests": 2, "nope": 1}}, 7)       # unknown key, unknown engine
    from agentrt.vllm.connector import AgentRTConnector
    cfg = prom.prom_metrics._kv_transfer_config
    assert AgentRTConnector.build_prom_metrics(SimpleNamespace(kv_transfer_config=cfg), {},
                                               ["model_name", "engine"], {0: ["m", "0"]}) is None


# ------------------------------------------------------------------ a real vLLM server
def scrape(srv) -> dict[tuple, float]:
    import httpx
    r = httpx.get(srv.base_url + "/metrics", timeout=30)
    r.raise_for_status()
    return samples(r.text, "")


def _post(srv, body: dict) -> dict:
    import httpx
    r = httpx.post(srv.base_url + "/v1/completions", json={"model": srv.served_name, "max_tokens": 1,
                                                           "temperature": 0, **body}, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def _prompt(seed: int, n: int = 96) -> list[int]:
    return [(seed * 7919 + i * 104729) % 3000 + 16 for i in range(n)]


@requires_vllm
@pytest.mark.slow
def test_metrics_on_vllms_own_endpoint(vllm_servers, vllm_log_dir):
    from agentrt.wire.kvhints import action, agentrt_actions, envelope
    from agentrt.vllm.prom import METRICS
    from test_dashboard import DASHBOARD, sample_names, unknown_metrics
    srv, _ = connector_server(vllm_servers, vllm_log_dir, "pbkv-lae")
    lab = {"model_name": srv.served_name, "engine": "0", "policy": "pbkv-lae"}
    before = scrape(srv)
    wf = f"metrics-{UNIQ}"
    _post(srv, {"prompt": _prompt(1), "vllm_xargs": {"agentrt_workflow": wf, "agentrt_agent": "planner"}})
    _post(srv, {"prompt": _prompt(1) + _prompt(2, 40),
                "vllm_xargs": {"agentrt_workflow": wf, "agentrt_agent": "planner", "agentrt_end": 1}})
    _post(srv, {"prompt": _prompt(3), "vllm_xargs": {"agentrt_workflow": wf + "-w", "agentrt_warmup": 1}})
    acts = agentrt_actions(wf + "-h", "coder", end=True) + [action("agentrt.bogus")]
    _post(srv, {"prompt": _prompt(4), "kv_transfer_params": {"kv_hints": envelope(acts, f"m-{UNIQ}")}})

    def d(name: str, **labels: str) -> float:
        return value(after, name, **lab, **labels) - value(before, name, **lab, **labels)

    deadline = time.time() + 30     # stats reach the API server with the step's outputs: poll
    while True:
        after = scrape(srv)
        ok = (d("agentrt_connector_requests_total") >= 3 and d("agentrt_connector_warmups_total") >= 1
              and d("agentrt_connector_workflows_ended_total", reason="client") >= 2
              and d("agentrt_connector_hints_ignored_total", reason="unknown_type") >= 1)
        if ok or time.time() > deadline:
            break
        time.sleep(0.5)
    assert ok, {k: v for k, v in after.items() if k[0].startswith("agentrt_connector_") and v}
    assert d("agentrt_connector_hint_actions_total") >= 2
    assert value(after, "agentrt_connector_runtime_failed", **lab) == 0
    assert value(after, "agentrt_connector_mirrored_blocks", **lab) > 0
    assert value(after, "agentrt_connector_reorders_total", **lab) > 0      # pbkv-lae orders the queue
    assert value(after, "agentrt_connector_runtime_seconds_total", **lab) > 0   # it observed events
    # the connector's whole cost: every hook, the runtime's and reorder time included
    assert d("agentrt_connector_steps_total") > 0
    hook = value(after, "agentrt_connector_hook_seconds_total", **lab)
    assert hook >= value(after, "agentrt_connector_runtime_seconds_total", **lab) > 0
    exported = {n for n, _ in after}
    for m in METRICS:
        assert m.name + ("_total" if m.kind == "counter" else "") in exported, m.name
    # the dashboard's connector panels query names this server exports
    fams = {n: "unknown" for n in exported}
    dash = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert not unknown_metrics(dash, sample_names(fams), "agentrt_connector_")


@requires_vllm
def test_in_the_scheduler_class_the_stats_go_to_the_side_port_not_to_vllm():
    """Hosted by `AgentRTScheduler` (`stats_to_side(side)`): vLLM gets no stats, and the side
    exporter's totals equal the hosted runtime's own, as often as vLLM would have had them."""
    from test_vllm_connector import _batch, _connector, _requests

    from agentrt.vllm.side_metrics import SideMetrics
    conn, pool = _connector("cachesage", 64)
    side = SideMetrics("m", "0", "cachesage")
    conn.stats_to_side(side)
    for r in _requests(3, 20):
        _batch(pool, conn, [r])
        assert conn.get_kv_connector_stats() is None
    smp = samples(_text(side.registry))
    assert value(smp, "agentrt_connector_requests_total") == conn.hosted.stats()["arrived"] == 20
    assert value(smp, "agentrt_connector_evictions_total", reason="reuse") == conn.hosted.stats()["evicted"]
    conn.stats_to_side()                                   # no side exporter: nothing reported at all
    _batch(pool, conn, _requests(4, 2))
    assert conn.get_kv_connector_stats() is None
    assert value(samples(_text(side.registry)), "agentrt_connector_requests_total") == 20


"""agentrt's connector metrics on a port of their own, for agentrt hosted in vLLM's scheduler class.

Without a configured KV connector vLLM's API server builds no metric families for one (and would
fail on stats it has no class for), so `AgentRTScheduler` reports nothing on vLLM's /metrics. With
`"metrics_port": N` in its settings the scheduler process serves the same `agentrt_connector_*`
families (`prom.METRICS`: names, help, labels and values as on vLLM's /metrics with the connector)
at `http://metrics_host:N/metrics`, from prometheus_client's own HTTP server in a daemon thread.

Model: the scheduler thread hands the hosted runtime's cumulative stats over when
`prom.StatsReporter.due` says they moved (so a decode step that changed nothing costs a tuple
comparison, as with the connector); `update` turns them into totals and swaps one reference, and a
scrape reads the latest totals, never the runtime, so the HTTP thread takes no lock and can see no
half-updated state. Counters are cumulative since start-up (a scrape between two updates reads the
earlier totals). Assumptions: one engine per scheduler process (`engine` label from vLLM's data
parallel rank); the port is free (a bound port fails vLLM's start-up with the port named).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from agentrt.vllm.prom import COUNTERS, GAUGES, METRICS, totals

log = logging.getLogger("vllm.agentrt")


class SideMetrics:
    """A prometheus_client collector over the latest totals, and the server that exposes it."""

    def __init__(self, model_name: str, engine: str, policy: str) -> None:
        from prometheus_client import CollectorRegistry
        self.base = {"model_name": model_name, "engine": engine, "policy": policy}
        self.latest: dict[str, dict[str, float]] = totals({})
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)
        self.server = None

    def update(self, stats: dict) -> None:
        self.latest = totals(stats)          # one reference swap: scrapes see old or new, whole

    def collect(self) -> Iterator:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
        snap = self.latest
        names, base = list(self.base), list(self.base.values())
        for m in METRICS:
            labels = names + ([m.label] if m.label else [])
            if m.kind == "counter":
                fam = CounterMetricFamily(m.name, m.doc, labels=labels)
                values = snap[COUNTERS]
            else:
                fam = GaugeMetricFamily(m.name, m.doc, labels=labels)
                values = snap[GAUGES]
            if m.label is None:
                fam.add_metric(base, float(values.get(m.short, 0)))
            else:
                for v, key in zip(m.values, m.keys()):
                    fam.add_metric(base + [v], float(values.get(key, 0)))
            yield fam

    def serve(self, host: str, port: int) -> str:
        """Start the HTTP server (daemon thread); returns its /metrics URL."""
        from prometheus_client import start_http_server
        try:
            self.server, _ = start_http_server(port, addr=host, registry=self.registry)
        except OSError as e:
            raise OSError(f"agentrt: metrics_port {port} on {host}: {e}") from e
        url = f"http://{host}:{self.server.server_port}/metrics"
        log.info("agentrt: connector metrics at %s", url)
        return url

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

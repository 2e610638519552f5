"""The Grafana dashboard (dashboards/agentrt.json) queries only metrics that exist.

Every metric name in every panel's PromQL `expr` and every template variable's query is checked
against the sample names actually exported: `agentrt serve`'s from its own `/metrics` (the app
in-process against the fake upstream, after a few calls), vLLM's from the metric definitions in
its installed source (`vllm/v1/metrics/loggers.py`, read, not imported: no engine starts), the
agentrt connector's (`agentrt_connector_*`, exported on vLLM's /metrics) from the exposition of
the families vLLM's own `KVConnectorProm` builds through the connector's `build_prom_metrics`, in
a private registry (no engine starts; test_vllm_metrics.py checks the same names on a real
server's /metrics).
Sample names follow prometheus_client's exposition: a counter `x` is `x_total`, a histogram `x`
is `x_bucket`, `x_sum` and `x_count`, a gauge `x` is `x`; so `agentrt_hit_rate_total` or
`agentrt_requests` (without `_total`) fail as surely as a name that was never defined.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import re
from pathlib import Path

import pytest

DASHBOARD = Path(__file__).resolve().parents[1] / "dashboards" / "agentrt.json"
# PromQL words that look like names but are not metrics (functions are told by their "(")
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
            "unless", "offset", "inf", "nan", "start", "end"}
SUFFIXES = {"counter": ("_total", "_created"), "gauge": ("",), "info": ("_info",), "unknown": ("",),
            "histogram": ("_bucket", "_sum", "_count", "_created"),
            "summary": ("", "_sum", "_count", "_created")}
CONNECTOR = "agentrt_connector_"       # the vLLM connector's metrics (on vLLM's /metrics)
VLLM_KINDS = {"_counter_cls": "counter", "_gauge_cls": "gauge", "_histogram_cls": "histogram"}


# ------------------------------------------------------------------ reading the dashboard
def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (Grafana variables allowed)."""
    s = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', " ", expr)     # strings
    s = re.sub(r"\{[^}]*\}", " ", s)                                            # label matchers
    s = re.sub(r"\[[^\]]*\]", " ", s)                                           # ranges, subqueries
    s = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s)  # label lists
    s = re.sub(r"\$\{[^}]*\}|\$\w+", " ", s)                                    # Grafana variables
    names = set()
    for m in re.finditer(r"(?<![\w:.])[A-Za-z_:][\w:]*", s):
        rest = s[m.end():].lstrip()
        if m.group() not in KEYWORDS and not rest.startswith("("):
            names.add(m.group())
    return names


def variable_exprs(var: dict) -> list[str]:
    """The PromQL inside a query variable: `label_values(expr, label)`, `query_result(expr)`."""
    q = var.get("query")
    q = q.get("query", "") if isinstance(q, dict) else (q or "")
    m = re.fullmatch(r"\s*label_values\((.*),\s*\w+\s*\)\s*", q) or \
        re.fullmatch(r"\s*(?:query_result|metrics)\((.*)\)\s*", q)
    return [m.group(1)] if m else []


def all_panels(dash: dict) -> list[dict]:
    out = []
    for p in dash["panels"]:
        out.append(p)
        out.extend(p.get("panels", []))          # a collapsed row holds its panels
    return out


def dashboard_queries(dash: dict) -> list[tuple[str, str]]:
    """(where, PromQL) for every panel target and every query variable."""
    out = [(f"panel {p['title']!r} target {t.get('refId')}", t["expr"])
           for p in all_panels(dash) for t in p.get("targets", []) if t.get("expr")]
    out += [(f"variable ${v['name']}", e) for v in dash["templating"]["list"] if v["type"] == "query"
            for e in variable_exprs(v)]
    return out


def unknown_metrics(dash: dict, exported: set[str], prefix: str = "",
                    exclude: tuple[str, ...] = ()) -> list[str]:
    """'where: name' for each queried name that starts with `prefix` (and none of `exclude`) and
    is not exported."""
    return [f"{where}: {name}" for where, expr in dashboard_queries(dash)
            for name in sorted(metric_names(expr))
            if name.startswith(prefix) and not name.startswith(exclude) and name not in exported]


def all_names(dash: dict) -> set[str]:
    return {n for _, e in dashboard_queries(dash) for n in metric_names(e)}


# ------------------------------------------------------------------ what is exported
def sample_names(families: dict[str, str]) -> set[str]:
    """Exposed sample names of {family name: type}, as prometheus_client writes them."""
    out = set()
    for name, kind in families.items():
        if kind == "counter" and name.endswith("_total"):
            name = name[:-len("_total")]        # prometheus_client strips it, then adds it back
        out.update(name + s for s in SUFFIXES.get(kind, ("",)))
    return out


@pytest.fixture(scope="module")
def serve_exported() -> set[str]:
    """`agentrt serve`'s /metrics after a few calls, parsed by prometheus_client's own parser."""
    pytest.importorskip("fastapi", reason="the serve extra is not installed")
    from fastapi.testclient import TestClient
    from prometheus_client.parser import text_string_to_metric_families

    from agentrt.serve.app import ServeConfig, create_app
    from serve_fakes import FakeUpstream

    up = FakeUpstream()
    try:
        app = create_app(ServeConfig(up.url, "cachesage", kv_capacity_tokens=100_000, act_interval_s=60))
        with TestClient(app) as client:
            body = {"model": "m", "messages": [{"role": "system", "content": "You plan. " * 40},
                                               {"role": "user", "content": "go"}]}
            for end in ("false", "true"):
                h = {"X-Agent-Id": "planner", "X-Workflow-Id": "wf-1", "X-Workflow-End": end}
                assert client.post("/v1/chat/completions", json=body, headers=h).status_code == 200
            text = client.get("/metrics").text
    finally:
        up.close()
    fams = list(text_string_to_metric_families(text))
    names = sample_names({f.name: f.type for f in fams}) | {s.name for f in fams for s in f.samples}
    assert "agentrt_workflows_ended_total" in names and 'reason="client"' in text
    return names


@pytest.fixture(scope="module")
def vllm_exported() -> set[str]:
    """vLLM's metric names and types from its installed source, without importing vLLM."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or spec.origin is None:
        pytest.skip('vLLM is not installed (pip install -e ".[vllm]")')
    src = Path(spec.origin).parent / "v1" / "metrics" / "loggers.py"
    fams: dict[str, str] = {}
    for node in ast.walk(ast.parse(src.read_text(encoding="utf-8"))):
        kind = VLLM_KINDS.get(node.func.attr) if isinstance(node, ast.Call) and \
            isinstance(node.func, ast.Attribute) else None
        for kw in node.keywords if kind else ():
            if kw.arg == "name" and isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str):
                fams[kw.value.value] = kind
    assert fams.get("vllm:prefix_cache_hits") == "counter", f"vLLM's metric definitions moved ({src})"
    return sample_names(fams)


@pytest.fixture(scope="module")
def connector_exported() -> set[str]:
    """The agentrt connector's metrics as vLLM builds and exposes them (see the module docstring)."""
    if importlib.util.find_spec("vllm") is None:
        pytest.skip('vLLM is not installed (pip install -e ".[vllm]")')
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from test_vllm_metrics import exporter

    _, reg = exporter()
    fams = list(text_string_to_metric_families(generate_latest(reg).decode()))
    names = sample_names({f.name: f.type for f in fams}) | {s.name for f in fams for s in f.samples}
    assert "agentrt_connector_runtime_failed" in names and "agentrt_connector_evictions_total" in names
    return names


@pytest.fixture(scope="module")
def dash() -> dict:
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))


# ------------------------------------------------------------------ the checks
def test_every_agentrt_metric_in_the_dashboard_is_exported(dash, serve_exported):
    assert any(n.startswith("agentrt_") for n in all_names(dash))
    missing = unknown_metrics(dash, serve_exported, "agentrt_", exclude=(CONNECTOR,))
    assert not missing, "panels query metrics agentrt serve does not export:\n" + "\n".join(missing)


def test_every_connector_metric_in_the_dashboard_is_exported(dash, connector_exported):
    assert any(n.startswith(CONNECTOR) for n in all_names(dash))
    missing = unknown_metrics(dash, connector_exported, CONNECTOR)
    assert not missing, "panels query metrics the vLLM connector does not export:\n" + "\n".join(missing)


def test_every_vllm_metric_in_the_dashboard_is_exported(dash, vllm_exported):
    assert any(n.startswith("vllm:") for n in all_names(dash))
    missing = unknown_metrics(dash, vllm_exported, "vllm:")
    assert not missing, "panels query metrics vLLM 0.32 does not define:\n" + "\n".join(missing)


def test_every_name_is_an_agentrt_or_vllm_metric(dash):
    other = sorted(n for n in all_names(dash) if not n.startswith(("agentrt_", "vllm:")))
    assert not other, f"names from no known exporter (or a PromQL form the checker misreads): {other}"


@pytest.mark.parametrize("expr,bad", [
    ('sum(rate(agentrt_nope_total{policy=~"$policy"}[5m]))', "agentrt_nope_total"),
    ("agentrt_hit_rate_total", "agentrt_hit_rate_total"),                   # a gauge has no _total
    ("sum(rate(agentrt_requests[5m]))", "agentrt_requests"),                # a counter is exposed with it
    ("histogram_quantile(0.9, sum by (le) (rate(agentrt_request_seconds_total[$__rate_interval])))",
     "agentrt_request_seconds_total"),
    ("rate(agentrt_workflows_ended_bucket[1m]) / on (tenant) group_left (reason) agentrt_workflows_open",
     "agentrt_workflows_ended_bucket"),
])
def test_the_check_catches_a_metric_that_does_not_exist(expr, bad, serve_exported):
    fake = {"panels": [{"title": "x", "targets": [{"refId": "A", "expr": expr}]}],
            "templating": {"list": []}}
    assert unknown_metrics(fake, serve_exported) == [f"panel 'x' target A: {bad}"]


@pytest.mark.parametrize("expr,bad", [
    ('sum by (reason) (rate(agentrt_connector_nope_total{model_name=~"$model"}[5m]))',
     "agentrt_connector_nope_total"),
    ("max(agentrt_connector_runtime_failed_total)", "agentrt_connector_runtime_failed_total"),
    ("sum(rate(agentrt_connector_evictions[5m]))", "agentrt_connector_evictions"),
])
def test_the_check_catches_a_connector_metric_that_does_not_exist(expr, bad, connector_exported):
    fake = {"panels": [{"title": "x", "targets": [{"refId": "A", "expr": expr}]}],
            "templating": {"list": []}}
    assert unknown_metrics(fake, connector_exported, CONNECTOR) == [f"panel 'x' target A: {bad}"]


def test_the_name_reader_skips_labels_functions_variables_and_numbers():
    expr = ('histogram_quantile(0.95, sum by (le, tenant) (rate(agentrt_request_seconds_bucket'
            '{policy=~"$policy", endpoint!="x y"}[$__rate_interval] offset 5m))) * 1e3 '
            '/ on (policy) group_left max without (agent) (vllm:kv_cache_usage_perc) > bool 0.5')
    assert metric_names(expr) == {"agentrt_request_seconds_bucket", "vllm:kv_cache_usage_perc"}
    q = {"query": {"query": 'label_values(agentrt_x{a="b"}, tenant)'}}
    assert variable_exprs(q) == ['agentrt_x{a="b"}']
    assert variable_exprs({"query": "label_values(policy)"}) == []


def test_dashboard_model(dash):
    """Grafana 10+ model, one Prometheus datasource variable that every panel and target uses."""
    assert dash["schemaVersion"] >= 38 and dash["uid"] and dash["title"]
    ds = [v for v in dash["templating"]["list"] if v["type"] == "datasource"]
    assert len(ds) == 1 and ds[0]["query"] == "prometheus"
    ref = {"type": "prometheus", "uid": "${%s}" % ds[0]["name"]}
    ids = [p["id"] for p in all_panels(dash)]
    assert len(ids) == len(set(ids))
    for p in all_panels(dash):
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24 and g["h"] > 0, p["title"]
        if p["type"] != "row":
            assert p["datasource"] == ref and p["targets"], p["title"]
            assert all(t["datasource"] == ref and t["expr"].strip() for t in p["targets"]), p["title"]
    for v in dash["templating"]["list"]:
        if v["type"] == "query":
            assert v["datasource"] == ref and variable_exprs(v), v["name"]

"""What a bench run hands people: the versioned JSON (validated against docs/results-schema.json),
the CSV, the table (never cut), the figure, and the sweep figures of benchmarks/sweeps.py."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from agentrt.bench.output import SCHEMA_VERSION

REPO = Path(__file__).resolve().parents[1]
SCHEMA = json.loads((REPO / "docs" / "results-schema.json").read_text())
POLICIES = ["lru", "kvflow", "oracle", "belady", "infinite"]


def validate(doc: dict) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    jsonschema.Draft202012Validator(SCHEMA).validate(doc)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One real `agentrt bench` with a host tier, a training split, every kind of bound."""
    d = tmp_path_factory.mktemp("bench")
    args = ["bench", "--workload", "mtbench", "--workflows", "12", "--concurrency", "4",
            "--gpu-blocks", "300", "--host-blocks", "300", "--policies", ",".join(POLICIES),
            "--quiet", "--json", str(d / "r.json"), "--csv", str(d / "r.csv"), "--plot", str(d / "r.svg")]
    p = subprocess.run([sys.executable, "-m", "agentrt.cli", *args], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    return d, p


def test_bench_json_validates_against_the_schema(run):
    d, _ = run
    doc = json.loads((d / "r.json").read_text())
    assert doc["schema_version"] == SCHEMA_VERSION and list(doc)[0] == "schema_version"
    validate(doc)
    res = doc["results"]
    assert list(res) == POLICIES
    assert all(0.0 <= r["hit_rate"] <= 1.0 for r in res.values())          # fractions, not %
    assert res["lru"]["host_hit_rate"] > 0
    assert res["lru"]["ttft_p50_s"] <= res["lru"]["ttft_p90_s"] <= res["lru"]["ttft_p99_s"]
    assert res["belady"]["ttft_p90_s"] is None and res["belady"]["offline"]
    assert doc["config"]["train"]["workflows"] == 3                          # 25% of 12


def test_schema_rejects_percentages_and_a_missing_version(run):
    jsonschema = pytest.importorskip("jsonschema")
    doc = json.loads((run[0] / "r.json").read_text())
    bad = json.loads(json.dumps(doc))
    bad["results"]["lru"]["hit_rate"] = 43.0
    with pytest.raises(jsonschema.ValidationError):
        validate(bad)
    del doc["schema_version"]
    with pytest.raises(jsonschema.ValidationError):
        validate(doc)


def test_api_document_validates_too():
    import agentrt
    res = agentrt.simulate("mtbench", ["lru", "belady"], workflows=6, concurrency=3, gpu_blocks=300)
    assert res.doc["schema_version"] == SCHEMA_VERSION
    validate(res.doc)


def test_csv_has_one_row_per_policy_in_json_units(run):
    d, _ = run
    doc = json.loads((d / "r.json").read_text())
    rows = list(csv.DictReader((d / "r.csv").open()))
    assert [r["policy"] for r in rows] == POLICIES
    lru = rows[0]
    assert float(lru["hit_rate"]) == pytest.approx(doc["results"]["lru"]["hit_rate"])
    assert lru["gpu_blocks"] == "300" and lru["concurrency"] == "4" and lru["train_workflows"] == "3"
    assert lru["preset"] == doc["config"]["preset"] and rows[3]["ttft_mean_s"] == ""


def test_table_header_states_load_capacity_preset_and_split(run):
    _, p = run
    head = p.stdout[:p.stdout.index("┏")]
    for text in ("closed loop, 4 workflows at once", "300 GPU blocks x 16 tokens", "300 host blocks",
                 "preset: llama3.1-8b-h100", "training split: first 3 of 12 workflows"):
        assert text in head, text
    for col in ("TTFT p50 s", "TTFT p90 s", "TTFT p99 s"):
        assert col in p.stdout
    assert "results written to" in p.stderr and "plot written to" in p.stderr


def test_table_is_not_cut_on_a_narrow_console(run):
    from rich.console import Console

    from agentrt.bench.report import print_result
    doc = json.loads((run[0] / "r.json").read_text())
    con = Console(width=80, record=True, file=open("/dev/null", "w"), color_system=None)
    print_result(doc, con)
    text = con.export_text()
    assert "…" not in text
    r = doc["results"]["lru"]
    for cell in (f"{r['prefill_tokens']:,}", f"{r['e2e_p99_s']:.3f}", f"{r['throughput_tok_s']:,.0f}"):
        assert cell in text, cell
    assert con.width == 80                  # the console is left as it was


def test_figure_carries_settings_stacked_hits_reference_lines_and_latency_axes(run):
    from agentrt.bench.plot import build_figure
    doc = json.loads((run[0] / "r.json").read_text())
    fig = build_figure(doc)
    try:
        title = fig._suptitle.get_text()
        assert "load: closed loop, 4 workflows at once" in title and "training split" in title
        hit_ax, *lat = fig.axes
        labels = [t.get_text() for t in hit_ax.get_legend().get_texts()]
        for want in ("GPU hit", "host-tier hit", "LRU", "oracle bound", "belady bound", "infinite bound"):
            assert any(want in lb for lb in labels), (want, labels)
        assert len(hit_ax.containers) == 2                  # GPU and host bars, stacked
        assert any(t.get_text().endswith("host)") for t in hit_ax.texts)    # value labels
        assert [a.get_title().split(" (")[0] for a in lat][:3] == ["TTFT mean", "TTFT p90", "TTFT p99"]
        assert all(a.get_xlim()[0] == 0 for a in lat)       # zero-based ...
        assert len({a.get_xlim()[1] for a in lat}) == len(lat)   # ... each on its own scale
        assert all("change vs LRU" in a.get_title() for a in lat)
        assert any(t.get_text().endswith("%)") for a in lat for t in a.texts)
    finally:
        import matplotlib.pyplot as plt
        plt.close(fig)
    svg = (run[0] / "r.svg").read_text()
    assert svg.lstrip().startswith("<?xml") and "</svg>" in svg


def test_sweep_figures_share_axes_and_keep_every_line_visible(tmp_path):
    from benchmarks import sweeps
    styles = [(m, str(ls)) for _, m, ls in sweeps.STYLES.values()]
    assert len(set(m for m, _ in styles)) == len(styles) and len(set(styles)) == len(styles)
    out = {"workload": "mix", "workflows": 10, "concurrency": 8,
           "pressure": {b: {p: 0.1 * i + b / 1e5 for i, p in enumerate(sweeps.SWEEP_POLICIES)}
                        for b in (2000, 6430)},
           "noise": {b: {"lru": 0.2, "pbkv-lae": 0.25, "pbkv-he": {0.0: 0.3, 1.0: 0.2}} for b in (6430, 25720)}}
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig = sweeps.noise_figure(out)
    a, b = fig.axes
    assert a.get_shared_y_axes().joined(a, b) and a.get_shared_x_axes().joined(a, b)
    assert a.get_ylim()[0] == 0
    plt.close(fig)
    fig = sweeps.pressure_figure(out)
    lines = fig.axes[0].get_lines()
    assert len(lines) == len(sweeps.SWEEP_POLICIES)
    assert len({(ln.get_marker(), str(ln.get_linestyle())) for ln in lines}) == len(lines)
    plt.close(fig)
    written = sweeps.plot(out, tmp_path)
    assert [p.name for p in written] == ["pressure_sweep.png", "noise_sweep.png"]
    assert all(p.stat().st_size > 10_000 for p in written)


def test_tpot_is_recorded_when_the_engine_reports_it():
    from agentrt.engine.metrics import Metrics
    m = Metrics()
    assert m.summary()["tpot_mean_s"] is None
    m.record_tpot(1.0, 2.0, 11)      # 10 tokens after the first in 1 s
    m.record_tpot(0.0, 5.0, 1)       # one token: no TPOT
    s = m.summary()
    assert s["tpot_mean_s"] == pytest.approx(0.1) and s["tpot_p99_s"] == pytest.approx(0.1)

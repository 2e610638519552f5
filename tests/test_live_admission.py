"""benchmarks/live_admission.py: its search, summaries and table (fast), and the CI version of the
whole script on a real vLLM (slow: two servers, one `agentrt serve`)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bench_scripts import REPO, load_script
from vllm_support import requires_vllm


@pytest.fixture
def la():
    return load_script("live_admission")


def test_bisect_finds_the_highest_rate_within_the_slo(la):
    seen = []

    def probe(rate):                       # p90 TTFT grows past 1.0 s above 0.3 workflows/s
        seen.append(rate)
        return 0.5 if rate <= 0.3 else 2.0
    lo, hi, points = la.bisect(probe, [], 0.1, 1.0, expand=4, steps=4)
    assert lo <= 0.3 < hi and hi / lo < 1.2 and len(seen) == len(points) == 3 + 4     # 0.1, 0.2, 0.4, then 4 steps
    lo, hi, _ = la.bisect(probe, [], 1.0, 1.0, expand=4, steps=0)       # halving down to it
    assert (lo, hi) == (0.25, 0.5)
    lo, hi, _ = la.bisect(probe, [(0.2, 0.5), (0.4, 2.0)], 0.2, 1.0, expand=0, steps=0)
    assert (lo, hi) == (0.2, 0.4)                                          # nothing probed


def test_summaries_criteria_and_table(la):
    def row(e2e, p99, sim):
        return {"e2e_mean_s": e2e, "e2e_p99_s": p99, "ttft_p50_s": 0.1, "ttft_p90_s": 0.2, "ttft_p99_s": 0.3,
                "hit_rate": 0.5, "sim_e2e_mean_s": sim, "errors": 0}
    hi = {"stock": la.summarise([row(100, 300, 90), row(120, 320, 90), row(110, 310, 90)]),
          "agent+pbkv-ta": la.summarise([row(50, 200, 40), row(40, 250, 40), row(45, 260, 40)])}
    assert hi["stock"]["e2e_mean_s"] == 110 and hi["stock"]["e2e_mean_s_range"] == [100, 120]
    lo = {"stock": la.summarise([row(10, 30, 9)]), "agent+pbkv-ta": la.summarise([row(10.2, 30, 9)])}
    doc = {"sustainable_rate": 0.5, "slo_ttft_p90_s": 1.0, "loads": {"0.8": lo, "1.2": hi},
           "goodput": {"stock": 0.5, "agent+pbkv-ta": 0.6}}
    c = la.criteria(doc)
    assert c["best_pair"] == "agent+pbkv-ta" and c["e2e_mean_x_at_1.2"] == pytest.approx(110 / 45)
    assert c["e2e_p99_no_worse_at_1.2"] and c["goodput_x"] == pytest.approx(1.2)
    assert c["e2e_mean_worse_at_0.8"] == pytest.approx(0.02)
    assert c["sim_e2e_mean_x_at_1.2"] == pytest.approx(90 / 40)
    doc.update(criteria=c, settings={"source": "--workload team", "runs": 3, "model_size": "tiny",
                                     "vllm_blocks": 256, "command": "python -m benchmarks.live_admission"})
    md = la.markdown({"team": doc})
    assert "| 1.2 | agent+pbkv-ta | 45.0 (40.0-50.0) | 40.0 |" in md and "best_pair agent+pbkv-ta" in md


def _preset(path):
    """A preset file of the shape `agentrt calibrate` writes (its figures are not a measurement:
    the smoke run checks the pipeline, not the simulator's prediction)."""
    from test_calibrate import _doc
    path.write_text(json.dumps(_doc()))


@requires_vllm
@pytest.mark.slow
def test_the_ci_version_runs_end_to_end(tmp_path, tiny_model):
    preset = tmp_path / "preset.json"
    _preset(preset)
    out = tmp_path / "la.json"
    cmd = [sys.executable, "-m", "benchmarks.live_admission", "--smoke", "--preset-file", str(preset),
           "--json", str(out), "--work-dir", str(tmp_path / "work")]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=REPO)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["sustainable_rate"] == 0.5 and list(doc["loads"]) == ["1.2"]
    m = doc["loads"]["1.2"]
    assert set(m) == {"stock", "las+lru"}
    for pair in m.values():
        for k in ("e2e_mean_s", "e2e_p99_s", "ttft_p50_s", "ttft_p99_s", "sim_e2e_mean_s"):
            assert pair[k] is not None and pair[k] > 0, (k, pair)
        assert pair["errors"] == 0
    gate = doc["runs"]["1.2"]["las+lru"][0]["gate"]
    assert gate["scheduler"] == "las" and sum(gate["releases"].values()) == doc["runs"]["1.2"]["las+lru"][0]["calls"]


def test_sim_only_runs_the_method_in_the_simulator_on_the_engines_calls(tmp_path, tiny_model):
    """--sim-only: the calls as the engine would be sent them, every run simulated; the live keys
    hold the simulator's figures, the pool is the one --vllm-blocks names, and the JSON says
    sim_only so the docs' live table never shows it."""
    out = tmp_path / "s.json"
    base = ["-m", "benchmarks.live_admission", "--sim-only", "--workload", "team", "--workflows", "6",
            "--seed", "1", "--scale", "0.25", "--bisect", "1", "--expand", "3", "--goodput-steps", "0",
            "--preset-file", str(REPO / "docs/results/engine/preset-vllm-cpu-tiny-256x32.json")]
    docs = {}
    for blocks in (256, 32):
        o = tmp_path / f"s{blocks}.json"
        p = subprocess.run([sys.executable, *base, "--vllm-blocks", str(blocks), "--json", str(o),
                            "--work-dir", str(tmp_path / f"w{blocks}")],
                           capture_output=True, text=True, timeout=600, cwd=REPO)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
        docs[blocks] = json.loads(o.read_text())
    d = docs[256]
    assert d["settings"]["sim_only"] and d["settings"]["runs"] == 1 and d["sustainable_rate"] > 0
    assert (tmp_path / "w256" / "replayed-engine.jsonl").exists()
    for m in d["loads"]["1.2"].values():
        assert m["e2e_mean_s"] == m["sim_e2e_mean_s"] > 0
    # a pool of 32 blocks holds less than 256: the hit rate at the same load cannot be higher
    assert docs[32]["loads"]["1.2"]["stock"]["hit_rate"] < d["loads"]["1.2"]["stock"]["hit_rate"]
    p = subprocess.run([sys.executable, *base, "--vllm-blocks", "256"], capture_output=True, text=True,
                       timeout=120, cwd=REPO)
    assert p.returncode != 0 and "--json" in p.stderr          # never written among the live JSONs


def test_screen_table_and_sim_only_docs_are_kept_apart(tmp_path, monkeypatch):
    scr = load_script("live_admission_screen")
    rows = [{"workload": "team", "workflows": 24, "scale": 0.5, "vllm_blocks": 256, "sustainable_rate": 0.55,
             "criteria": {"best_pair": "agent+pbkv-ta", "e2e_mean_x_at_1.2": 1.004,
                          "e2e_p99_no_worse_at_1.2": True, "goodput_x": 1.2}},
            {"workload": "coding", "workflows": 24, "scale": 0.125, "vllm_blocks": 128,
             "error": "stock vLLM is past the SLO at every rate tried"}]
    md = scr.markdown({"preset": "p.json", "command": "python -m benchmarks.live_admission_screen",
                       "seconds": 3, "rows": rows})
    assert "| team | 24 | 0.5 | 256 | 0.550 | agent+pbkv-ta | 1.00x | True | 1.20 |" in md
    rows[0]["goodput_lower_bound"] = True
    assert "| True | >=1.20 |" in scr.markdown({"preset": "p", "command": "c", "seconds": 1, "rows": rows})
    assert "| coding | 24 | 0.125 | 128 | | stock vLLM is past the SLO" in md
    assert "Largest predicted speed-up: 1.00x (team" in md
    rep = load_script("live_admission_report")
    (tmp_path / "live-admission-x.json").write_text(json.dumps({"settings": {"sim_only": True}}))
    written = {}
    monkeypatch.setattr(rep, "RESULTS", tmp_path)
    monkeypatch.setattr(rep, "write", lambda part, text: written.update({part: text}))
    rep.write_docs()
    assert written == {"live-admission": "No stored run yet."}

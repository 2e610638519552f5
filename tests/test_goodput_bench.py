"""benchmarks/goodput.py: the grid's goodput and its refinement by bisection in the bracket the
grid leaves, with `run` replaced by a stand-in whose p90 TTFT crosses the SLO at a known rate."""

from pathlib import Path

import pytest

from bench_scripts import load_script


def point(mod, rate: float, knee: dict) -> dict:
    return {"rate": rate, "results": {p: {"ttft_p90_s": 1.0 if rate <= knee[p] else 3.0} for p in mod.POLICIES}}


def full_grid(mod) -> list[dict]:
    """A grid of three rates, the SLO crossed between 0.04 and 0.08, with every figure the report reads."""
    knee = {p: 0.05 for p in mod.POLICIES}
    pts = [point(mod, r, knee) for r in (0.02, 0.04, 0.08)]
    for pt in pts:
        for r in pt["results"].values():
            r.update(hit_rate=0.5, ttft_mean_s=0.5, e2e_mean_s=10.0, e2e_p99_s=20.0)
        pt.update(generate="agentrt generate ...", command="agentrt bench ...")
    return pts


@pytest.fixture
def mod():
    return load_script("goodput")


def test_grid_goodput_is_the_highest_rate_within_the_slo(mod):
    knee = {p: 0.05 for p in mod.POLICIES}
    pts = [point(mod, r, knee) for r in (0.02, 0.04, 0.08)]
    assert mod.goodput(pts, "lru", 2.0) == 0.04
    knee = {p: 0.01 for p in mod.POLICIES}
    assert mod.goodput([point(mod, r, knee) for r in (0.02, 0.04)], "lru", 2.0) == 0.0


@pytest.mark.parametrize("true_knee", [0.041, 0.05, 0.079])
def test_refinement_finds_the_crossing_inside_the_bracket(mod, monkeypatch, true_knee):
    knee = {p: true_knee for p in mod.POLICIES}
    calls = []

    def fake_run(preset, workload, rate, workflows, tmp, policies=mod.POLICIES):
        calls.append((rate, tuple(policies)))
        return point(mod, rate, knee)
    monkeypatch.setattr(mod, "run", fake_run)
    pts = [point(mod, r, knee) for r in (0.02, 0.04, 0.08)]
    out = mod.refine("p", "w", 10, Path("."), pts, "pbkv-ta", 2.0, steps=8)
    lo, hi = out["bracket"]
    assert lo <= true_knee < hi and hi / lo < 1.01      # 8 halvings of a 2x bracket, geometric
    assert out["goodput"] == lo and len(out["steps"]) == len(calls) == 8
    assert all(pol == ("pbkv-ta",) for _, pol in calls)   # one policy per refinement run


def test_nothing_to_refine_at_the_ends_of_the_grid(mod, monkeypatch):
    monkeypatch.setattr(mod, "run", lambda *a, **k: pytest.fail("no run expected"))
    within = [point(mod, r, {p: 1.0 for p in mod.POLICIES}) for r in (0.02, 0.04)]
    assert mod.refine("p", "w", 10, Path("."), within, "lru", 2.0, 5) == \
        {"goodput": 0.04, "bracket": [0.04, None], "steps": []}
    never = [point(mod, r, {p: 0.0 for p in mod.POLICIES}) for r in (0.02, 0.04)]
    assert mod.refine("p", "w", 10, Path("."), never, "lru", 2.0, 5)["goodput"] == 0.0


def test_the_report_states_both_goodputs(mod):
    pts = full_grid(mod)
    refined = {p: {"goodput": 0.05, "bracket": [0.05, 0.051], "steps": [(0.05, 1.0)]} for p in mod.POLICIES}
    text = mod.report("qwen3-32b-h200", pts, 2.0, refined)
    assert "Goodput on the grid" in text and "lru 0.040 (1.00x LRU)" in text
    assert "Goodput refined" in text and "lru 0.0500 (1.00x LRU) [0.0500, 0.0510)" in text


def test_the_docs_section_names_its_command_and_a_refinement_step(mod):
    pts = full_grid(mod)
    refined = {p: {"goodput": 0.04, "bracket": [0.04, 0.08], "steps": []} for p in mod.POLICIES}
    refined["lru"] = {"goodput": 0.0566, "bracket": [0.0566, 0.08], "steps": [(0.0566, 1.0)]}
    doc = {"command": "python -m benchmarks.goodput --workflows 10", "workload": "swebench", "workflows": 10,
           "slo_p90_ttft_s": 2.0, "presets": {"qwen3-32b-h200": pts}, "refined": {"qwen3-32b-h200": refined}}
    text = mod.render(doc)
    assert text.startswith("Built by `python -m benchmarks.goodput --workflows 10`")
    assert "--rate 0.0566" in text and "--preset qwen3-32b-h200 --policies lru --quiet" in text

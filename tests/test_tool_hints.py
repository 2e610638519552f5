"""Announced tool times: the simulator's model (`engine.tool_hints`), how they reach policies
(`CallFinished.tool_expected_s`), the `--tool-hints` option, and what they are worth to PBKV-TA."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from agentrt.engine.presets import get_preset
from agentrt.engine.replay import WorkflowReplay
from agentrt.engine.simulator import EngineConfig, Simulator
from agentrt.engine.tool_hints import ToolHints
from agentrt.errors import AgentrtError
from agentrt.policies.lru import LRUPolicy
from agentrt.runtime import events as ev
from agentrt.trace.schema import Call

from test_cli_errors import error_of, no_work  # noqa: F401  (fixture)


def test_exact_hints_are_the_wait_and_errors_are_lognormal_and_median_unbiased():
    assert ToolHints(0.0).estimate("w", 3, 12.5) == 12.5
    h = ToolHints(0.5, seed=7)
    logs = np.array([math.log(h.estimate(f"w{i}", i % 9, 10.0) / 10.0) for i in range(4000)])
    assert abs(np.median(logs)) < 0.05
    assert 0.45 < logs.std() < 0.55
    # one draw per (seed, workflow, call): the same everywhere, different across calls and seeds
    assert h.estimate("w1", 2, 10.0) == ToolHints(0.5, seed=7).estimate("w1", 2, 10.0)
    assert h.estimate("w1", 2, 10.0) != h.estimate("w1", 3, 10.0)
    assert h.estimate("w1", 2, 10.0) != ToolHints(0.5, seed=8).estimate("w1", 2, 10.0)
    # proportional to the wait
    assert h.estimate("w1", 2, 20.0) == pytest.approx(2 * h.estimate("w1", 2, 10.0))


def test_estimates_do_not_depend_on_the_hash_seed():
    code = "from agentrt.engine.tool_hints import ToolHints; print(repr(ToolHints(1.0).estimate('wf-9', 4, 3.0)))"
    outs = set()
    for seed in ("0", "1", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        outs.add(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                check=True).stdout)
    assert len(outs) == 1


@pytest.mark.parametrize("bad", [-0.1, math.nan, math.inf, "1"])
def test_bad_sigma_is_refused(bad):
    with pytest.raises(ValueError, match="sigma"):
        ToolHints(bad)


def _calls() -> list[Call]:
    """w: call 0, then two calls after it: one after a 4 s tool, one after a 9 s tool; then a
    last call with no wait."""
    return [Call("w", 0, 64, 4, [1, 2, 3, 4], agent="a", timestamp=0.0),
            Call("w", 1, 80, 4, [1, 2, 3, 4, 5], agent="b", after=(0,), think_ms=4000.0),
            Call("w", 2, 80, 4, [1, 2, 3, 4, 6], agent="c", after=(0,), think_ms=9000.0),
            Call("w", 3, 96, 4, [1, 2, 3, 4, 5, 7], agent="a", after=(1, 2), last=True)]


def test_replay_finish_reports_the_shortest_tool_wait_it_releases():
    rp = WorkflowReplay(iter(_calls()))
    arrived = rp.pop_arrivals(0.0)
    assert [c.call for _, c in arrived] == [0]
    tool_ms, ended = rp.finish(arrived[0][1], 1.0)
    assert tool_ms == 4000.0 and ended is None
    for _, c in rp.pop_arrivals(20.0):
        tool_ms, _ = rp.finish(c, 20.0)
        assert tool_ms == 0.0           # call 3 waits on nothing but its predecessors


class Recorder(LRUPolicy):
    wants_events = True

    def __init__(self) -> None:
        super().__init__()
        self.finished: dict[int, tuple[bool, float | None]] = {}

    def observe(self, e) -> None:
        if type(e) is ev.CallFinished:
            self.finished[e.call.index] = (e.tool_call, e.tool_expected_s)


@pytest.mark.parametrize("hints, expected", [(None, None), (ToolHints(0.0), 4.0)])
def test_the_simulator_announces_tool_times_only_when_asked(hints, expected):
    rec = Recorder()
    cfg = EngineConfig(get_preset("llama3.1-8b-h100"), 16, gpu_blocks=200)
    Simulator(cfg, rec, iter(_calls()), tool_hints=hints).run()
    assert rec.finished[0] == (True, expected)
    assert rec.finished[1] == (False, None) and rec.finished[3] == (False, None)


def test_tool_hints_option_is_checked_and_recorded(monkeypatch, capsys, no_work, tmp_path):  # noqa: F811
    assert "--tool-hints must be >= 0, got -1.0" in error_of(
        monkeypatch, capsys, "bench", "--workload", "gaia", "--tool-hints", "-1")
    assert "--tool-hints must be >= 0, got -1.0" in error_of(
        monkeypatch, capsys, "bench", "--workload", "gaia", "--engine", "vllm", "--tool-hints", "-1")
    from agentrt.api import simulate
    with pytest.raises(AgentrtError, match="tool_hints must be >= 0"):
        simulate("gaia", "lru", tool_hints=-2.0, workflows=4)


@pytest.mark.slow
def test_bench_records_the_setting(tmp_path):
    out = tmp_path / "r.json"
    subprocess.run([sys.executable, "-m", "agentrt.cli", "bench", "--workload", "gaia", "--workflows", "8",
                    "--policies", "lru,pbkv-ta", "--tool-hints", "0.5", "--quiet", "--json", str(out)],
                   check=True, capture_output=True)
    doc = json.loads(out.read_text())
    assert doc["config"]["tool_hints"] == 0.5
    from agentrt.bench.report import run_summary
    assert run_summary(doc)[2].endswith("| tool times announced, lognormal error 0.5")
    assert set(doc["results"]) == {"lru", "pbkv-ta"}


@pytest.mark.slow
def test_exact_tool_times_help_pbkv_ta_where_tools_are_slow():
    """gaia with 4x tool times at its live footprint (a row of the regime sweep, smaller): told
    when each tool wait ends, PBKV-TA keeps more of what is due; LRU does not read hints."""
    from agentrt.api import simulate
    kw = dict(workflows=40, seed=0, tool_scale=4.0, concurrency=8, gpu_blocks=4634)
    base = simulate("gaia", "lru,pbkv-ta", **kw)
    told = simulate("gaia", "lru,pbkv-ta", tool_hints=0.0, **kw)
    b = {r["policy"]: r["hit_rate"] for r in base.records()}
    t = {r["policy"]: r["hit_rate"] for r in told.records()}
    assert t["lru"] == b["lru"]
    assert t["pbkv-ta"] > b["pbkv-ta"] + 0.01


def test_the_posterior_weighs_announcements_by_their_measured_error():
    from agentrt.policies.pbkv.announced import LogStats, lognormal_residual, posterior
    prior, exact, noisy = (math.log(10.0), 0.25), (0.0, 0.0), (0.0, 4.0)
    assert math.exp(posterior(prior, exact, 30.0)[0]) == pytest.approx(30.0)       # taken at its word
    m, v = posterior(prior, noisy, 30.0)
    assert 10.0 < math.exp(m) < 13.0 and v < 0.25                                # mostly the prior
    assert math.exp(posterior(prior, (math.log(2.0), 0.0), 30.0)[0]) == pytest.approx(60.0)   # bias removed
    # mean residual life: the mean at 0, shrinking toward the median while due, never negative
    assert lognormal_residual(0.0, 0.0, 0.0) == pytest.approx(1.0)
    assert lognormal_residual(0.0, 0.0, 2.0) == 0.0
    assert lognormal_residual(0.0, 1.0, 0.0) == pytest.approx(math.exp(0.5))
    xs = np.exp(np.random.default_rng(0).normal(1.0, 0.8, 400_000))
    for w in (0.5, 2.0, 8.0):
        assert lognormal_residual(1.0, 0.64, w) == pytest.approx((xs[xs > w] - w).mean(), rel=0.03)
    assert 0.0 < lognormal_residual(0.0, 0.01, 1e6) < 1e6
    st = LogStats(keep=3)
    for x in (1.0, 2.0, 3.0, 100.0):
        st.add(x)
    assert len(st) == 3 and st.mean_var() == pytest.approx((35.0, ((2 - 35) ** 2 + (3 - 35) ** 2 + 65 ** 2) / 3))


def test_the_mapped_residual_keeps_the_observed_waits_shape_between_its_limits():
    from agentrt.policies.pbkv.announced import mapped_residual, posterior
    from agentrt.runtime.window import SampleWindow
    w = SampleWindow()
    for x in (1.0, 1.2, 0.9, 60.0, 55.0, 70.0):          # bimodal: a file read and a test run
        w.add(x)
    logs = w.log_values(1e-3)
    mp, vp = float(logs.mean()), float(logs.var())
    # a worthless announcement leaves the observed waits as they are
    m, v = posterior((mp, vp), (0.0, 1e12), 5.0)
    for waited in (0.0, 0.5, 10.0, 58.0):
        assert mapped_residual(logs, m, v, mp, vp, waited) == pytest.approx(w.residual(waited, 0.0), rel=1e-4)
    assert mapped_residual(logs, m, v, mp, vp, 100.0) == 100.0        # past them all: as long again
    # an exact one puts them all at the announced time
    m, v = posterior((mp, vp), (0.0, 0.0), 5.0)
    assert mapped_residual(logs, m, v, mp, vp, 2.0) == pytest.approx(3.0)
    # in between: an announced test run (60 s) expects a long wait, an announced read a short one
    long = mapped_residual(logs, *posterior((mp, vp), (0.0, 0.5), 60.0), mp, vp, 0.0)
    short = mapped_residual(logs, *posterior((mp, vp), (0.0, 0.5), 1.0), mp, vp, 0.0)
    assert short < 10.0 < long


def test_replicas_announce_tool_times_too():
    """`--replicas N` passes the announcements to every replica's runtime (cluster simulator)."""
    from agentrt.cluster.run import run_cluster
    rec = []

    def factory():
        r = Recorder()
        rec.append(r)
        return r
    cfg = EngineConfig(get_preset("llama3.1-8b-h100"), 16, gpu_blocks=200)
    run_cluster(_calls(), 2, "session", cfg, policy_factory=factory, tool_hints=ToolHints(0.0))
    seen = [v for r in rec for v in r.finished.values()]
    assert (True, 4.0) in seen and sum(1 for t, _ in seen if t) == 1

"""Tool-latency distributions (`agentrt.workloads.tools`) and `GenConfig.tool_scale`."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrt.workloads.base import GenConfig
from agentrt.workloads.registry import get_workload
from agentrt.workloads.tools import TOOLS, ToolLatency, quantiles, tool_latency, tool_ms

TOOL_USERS = ["hover", "swebench", "financebench", "gaia", "humaneval", "mtbench", "coding", "mix"]


def test_every_tool_is_documented_with_a_source():
    assert {"file_read", "search", "shell", "test_run", "code_exec", "web_fetch", "web_search",
            "human"} <= set(TOOLS)
    for name, t in TOOLS.items():
        assert t.name == name and t.source and t.summary
        assert 0 < t.lo_ms <= t.median_ms <= t.hi_ms


def test_same_seed_same_draws():
    a = [tool_ms("test_run", r) for r in [np.random.default_rng(3)] for _ in range(50)]
    b = [tool_ms("test_run", r) for r in [np.random.default_rng(3)] for _ in range(50)]
    assert a == b


@pytest.mark.parametrize("name", list(TOOLS))
def test_sampled_median_near_the_documented_one(name):
    t = TOOLS[name]
    p50 = quantiles(name, (0.5,))[0]
    if t.slow_share == 0:
        assert p50 == pytest.approx(t.median_ms, rel=0.05)
    else:   # a slow component pushes the median up, never down
        assert t.median_ms <= p50 <= t.median_ms * math.exp(t.sigma)


@pytest.mark.parametrize("name", list(TOOLS))
def test_draws_respect_the_clip(name):
    t = TOOLS[name]
    rng = np.random.default_rng(0)
    xs = [t.sample(rng) for _ in range(5000)]
    assert min(xs) >= t.lo_ms and max(xs) <= t.hi_ms
    assert t.from_uniform(0.0) >= t.lo_ms and t.from_uniform(1.0) <= t.hi_ms


@settings(max_examples=200, deadline=None)
@given(u=st.floats(min_value=0.0, max_value=1.0), name=st.sampled_from(sorted(TOOLS)))
def test_any_uniform_maps_inside_the_clip(u, name):
    t = TOOLS[name]
    assert t.lo_ms <= t.from_uniform(u) <= t.hi_ms


def test_a_draw_takes_exactly_one_uniform():
    """So changing a tool's figures never changes the workflows drawn after it."""
    for name in TOOLS:
        r1, r2 = np.random.default_rng(9), np.random.default_rng(9)
        tool_ms(name, r1)
        r2.uniform()
        assert r1.uniform() == r2.uniform()


def test_mixture_share_of_slow_component():
    t = TOOLS["shell"]
    rng = np.random.default_rng(1)
    xs = np.array([t.sample(rng) for _ in range(20_000)])
    # above 10 s: 86 % of the slow component (median 30 s, sigma 1), 0.1 % of the fast one
    assert np.mean(xs > 10_000) == pytest.approx(t.slow_share * 0.864, abs=0.01)


def test_bad_figures_rejected_and_unknown_tool_named():
    with pytest.raises(ValueError):
        ToolLatency("x", 10.0, 0.5, 20.0, 30.0, "guess")
    with pytest.raises(ValueError):
        ToolLatency("x", 10.0, 0.5, 1.0, 30.0, "guess", "", 1.0, 10.0, 0.5)
    with pytest.raises(KeyError, match="file_read"):
        tool_latency("teleport")


@pytest.mark.parametrize("scale", [0.0, -1.0, float("nan"), float("inf")])
def test_tool_scale_must_be_positive(scale):
    with pytest.raises(ValueError, match="tool_scale"):
        GenConfig(tool_scale=scale)


def _calls(name: str, scale: float) -> list[dict]:
    return [c.to_json() for c in get_workload(name).generate(GenConfig(workflows=15, seed=4,
                                                                         tool_scale=scale))]


@pytest.mark.parametrize("name", TOOL_USERS + ["team"])
def test_tool_scale_multiplies_every_think_time_and_nothing_else(name):
    base, scaled = _calls(name, 1.0), _calls(name, 3.0)
    assert len(base) == len(scaled)
    assert any(c.get("think_ms", 0) > 0 for c in base)
    for a, b in zip(base, scaled):
        assert b.get("think_ms", 0) == pytest.approx(3.0 * a.get("think_ms", 0), abs=0.004)
        a.pop("think_ms", None)
        b.pop("think_ms", None)
        assert json.dumps(a) == json.dumps(b)


def test_tool_scale_is_noted_in_the_header():
    wl = get_workload("mix")
    assert "x0.5" in wl.header(GenConfig(tool_scale=0.5)).description
    assert "think times" not in wl.header(GenConfig()).description

"""Shared test helpers: where ../shared is, and small trace builders."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

# Session fixtures for real vLLM servers, registered here so that every test module shares them
# (a fixture imported into two modules would start its servers twice).
from vllm_support import requires_vllm, tiny_model, vllm_log_dir, vllm_servers  # noqa: E402,F401

REPO = Path(__file__).resolve().parents[1]


def shared_dir() -> Path:
    env = os.environ.get("AGENTRT_SHARED")
    return Path(env) if env else REPO.parent / "shared"


SHARED = shared_dir()
MOONCAKE_CONV = SHARED / "traces" / "mooncake" / "conversation_trace.jsonl"
MOONCAKE_SYNTH = SHARED / "traces" / "mooncake" / "synthetic_trace.jsonl"
AG2_DIR = SHARED / "traces" / "ag2-captainagent"

needs_shared = pytest.mark.skipif(
    not MOONCAKE_CONV.exists(),
    reason=f"real traces not found at {SHARED} (../shared is absent; set AGENTRT_SHARED to its path)")


@pytest.hookimpl(tryfirst=True)      # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (`pytest -n 2 --dist loadgroup`, the README's CI line), the tests that
    share the session's vLLM servers (`vllm_servers`) go to one worker, so each server starts
    once; the tests that start engines of their own form a second group, which the other worker
    takes between the simulator's tests. Each worker runs one live-engine test at a time."""
    for item in items:
        if "vllm_servers" in item.fixturenames:
            item.add_marker(pytest.mark.xdist_group("vllm"))
        elif "tiny_model" in item.fixturenames or requires_vllm.mark in item.iter_markers("skipif"):
            item.add_marker(pytest.mark.xdist_group("vllm-own"))


def write_lines(path: Path, objs: list) -> Path:
    with open(path, "w") as f:
        for o in objs:
            f.write((o if isinstance(o, str) else json.dumps(o)) + "\n")
    return path


@pytest.fixture
def trace_file(tmp_path):
    def make(objs: list, name: str = "t.jsonl") -> Path:
        return write_lines(tmp_path / name, objs)
    return make


class FixedPredictor:
    """A stub workflow predictor: the same next-agent distribution for every workflow and step."""
    kind = "fixed"

    def __init__(self, agents, probs, horizon=2):
        import numpy as np
        self.agents = list(agents)
        self.horizon = horizon
        self.row = np.array(list(probs) + [1.0 - sum(probs)])

    def predict_batch(self, states):
        import numpy as np
        return np.tile(self.row, (len(states), self.horizon, 1))

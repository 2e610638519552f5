"""A light install: torch_geometric is the `gnn` extra; without it the server and the bench run, the
PBKV policies train the Markov predictor and say so, and asking for GraphSAGE says how to get it."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import re
import sys
from pathlib import Path

import pytest

import agentrt.predict
from agentrt.errors import AgentrtError, SetupWarning

ROOT = Path(__file__).resolve().parents[1]

# run first in a child interpreter: torch_geometric cannot be imported, whatever is installed
BLOCK = "import sys; sys.modules['torch_geometric'] = None; "


def setup_extras() -> dict:
    spec = importlib.util.spec_from_file_location("agentrt_setup", ROOT / "setup.py")
    mod = importlib.util.module_from_spec(spec)
    import setuptools
    real = setuptools.setup
    setuptools.setup = lambda **kw: None          # read EXTRAS without building anything
    try:
        spec.loader.exec_module(mod)
    finally:
        setuptools.setup = real
    return mod.EXTRAS


def test_torch_geometric_is_an_extra_only():
    block = re.search(r"^dependencies = \[(.*?)^\]", (ROOT / "pyproject.toml").read_text(), re.S | re.M)
    base = re.findall(r'"([^"]+)"', block.group(1))
    assert "torch==2.13.0" in base
    assert not any(d.lower().replace("-", "_").startswith("torch_geometric") for d in base)
    extras = setup_extras()
    assert any(d.startswith("torch_geometric") for d in extras["gnn"])
    assert not any("geometric" in d for name in ("serve", "vllm") for d in extras[name])
    assert 'pip install -e ".[test,serve,vllm,frameworks,ray,gnn]"' in (ROOT / "README.md").read_text()


@pytest.fixture
def no_gnn(monkeypatch):
    # submodules an earlier test imported would be found in sys.modules without their package
    for name in [m for m in sys.modules if m == "torch_geometric" or m.startswith("torch_geometric.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "torch_geometric", None)
    monkeypatch.delitem(sys.modules, "agentrt.predict.neural", raising=False)
    monkeypatch.delattr(agentrt.predict, "neural", raising=False)


def test_graphsage_says_how_to_install_it(no_gnn):
    from agentrt.predict.io import gnn_missing, make_predictor
    assert gnn_missing() == "torch_geometric"
    with pytest.raises(AgentrtError, match=r"pip install 'agentrt\[gnn\]'.*--predictor-kind markov"):
        make_predictor("graphsage")
    assert make_predictor("markov").horizon == 4


@pytest.mark.parametrize("name", ["pbkv", "pbkv-ta"])
def test_pbkv_falls_back_to_markov(no_gnn, name):
    from agentrt.policies.registry import make_policy
    from agentrt.workloads.base import GenConfig
    from agentrt.workloads.registry import get_workload
    calls = list(get_workload("mix").generate(GenConfig(workflows=12, concurrency=4)))
    policy = make_policy(name)
    with pytest.warns(SetupWarning, match=rf"{name}: the graphsage predictor needs torch_geometric"):
        policy.train(iter(calls), 16)
    assert type(policy.predictor).__name__ == "MarkovPredictor"


@pytest.mark.slow
def test_server_and_bench_without_torch_geometric():
    code = BLOCK + ("import agentrt.serve.app, agentrt.vllm.connector, sys; "
                    "from agentrt.cli import main; "
                    "sys.argv = ['agentrt', 'bench', '--workload', 'mix', '--workflows', '12', "
                    "'--policies', 'lru,pbkv', '--quiet']; main()")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "warning: pbkv: the graphsage predictor needs torch_geometric" in p.stderr
    assert "pbkv" in p.stdout

"""Policy plugins: `agentrt.policies` entry points, `register()` at any time, broken plugins.

Fast tests fake the entry points (importlib.metadata monkeypatched); the slow ones pip-install
examples/agentrt-policy-example into a temporary directory (`pip install --target`, put on
PYTHONPATH of the subprocesses, so the shared virtual environment is never changed) and run its
policy by name in `agentrt policies`, `agentrt bench`, `agentrt serve`'s app and, with vLLM, the
connector inside a real vLLM server.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

from agentrt.errors import AgentrtError
from agentrt.policies import registry
from agentrt.policies.lru import LRUPolicy
from vllm_support import requires_vllm

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "agentrt-policy-example"
BUILTIN = ["lru", "cachesage", "kvflow", "pbkv-lae", "pbkv-ta"]


# ---------------------------------------------------------------------------- fake entry points
class FakeDist:
    def __init__(self, name: str) -> None:
        self.name = name


class FakeEP:
    """An entry point as importlib.metadata returns it (name, value, dist, load)."""

    def __init__(self, name: str, value: str, dist: str) -> None:
        self.name, self.value, self.group, self.dist = name, value, registry.ENTRY_POINT_GROUP, FakeDist(dist)
        self.loads = 0

    def load(self):
        self.loads += 1
        return importlib.metadata.EntryPoint(self.name, self.value, self.group).load()


class KeepShallow(LRUPolicy):
    name = "keep-shallow"
    description = "fake plugin policy"


def make_fake_policy(seed: int = 0, **options):
    """a factory plugin: builds an LRU"""
    return LRUPolicy(seed=seed)


@pytest.fixture
def fake_plugins(monkeypatch):
    mod = types.ModuleType("agentrt_fake_plugin")
    mod.KeepShallow, mod.make_fake_policy, mod.NOT_A_POLICY = KeepShallow, make_fake_policy, 42
    monkeypatch.setitem(sys.modules, "agentrt_fake_plugin", mod)
    eps = [FakeEP("keep-shallow", "agentrt_fake_plugin:KeepShallow", "fake-good"),
           FakeEP("by-factory", "agentrt_fake_plugin:make_fake_policy", "fake-factory"),
           FakeEP("broken", "agentrt_no_such_module:Policy", "fake-broken"),
           FakeEP("not-a-policy", "agentrt_fake_plugin:NOT_A_POLICY", "fake-int"),
           FakeEP("lru", "agentrt_fake_plugin:KeepShallow", "fake-clash")]
    real = importlib.metadata.entry_points

    def entry_points(**kw):
        return eps if kw.get("group") == registry.ENTRY_POINT_GROUP else real(**kw)

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    registry.reload_plugins()
    yield eps
    monkeypatch.undo()
    registry.reload_plugins()


def test_plugins_join_the_builtins_and_broken_ones_warn(fake_plugins):
    with pytest.warns(registry.PolicyPluginWarning) as rec:
        names = registry.policy_names()
    msgs = " | ".join(str(w.message) for w in rec)
    assert "'broken' from package 'fake-broken'" in msgs and "failed to load" in msgs
    assert "'not-a-policy' from package 'fake-int'" in msgs and "not a Policy" in msgs
    assert "'lru' from package 'fake-clash'" in msgs
    assert all(n in names for n in BUILTIN + ["keep-shallow", "by-factory", "oracle"])
    assert "broken" not in names and "not-a-policy" not in names
    assert isinstance(registry.make_policy("lru"), LRUPolicy) and type(registry.make_policy("lru")) is LRUPolicy
    assert type(registry.make_policy("keep-shallow", seed=3)) is KeepShallow
    assert registry.describe("keep-shallow") == "fake plugin policy"
    assert registry.describe("by-factory") == "a factory plugin: builds an LRU"
    assert registry.policy_class("keep-shallow") is KeepShallow and registry.policy_class("by-factory") is None
    assert registry.plugin_source("keep-shallow").startswith("package 'fake-good'")
    with pytest.raises(AgentrtError, match="unknown policy 'broken'"):
        registry.make_policy("broken")


def test_entry_points_load_once(fake_plugins):
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", registry.PolicyPluginWarning)
        for _ in range(3):
            registry.policy_names()
            registry.make_policy("keep-shallow")
    assert fake_plugins[0].loads == 1


def test_plugin_runs_in_the_simulator_and_behind_the_server(fake_plugins):
    import warnings

    import agentrt
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", registry.PolicyPluginWarning)
        res = agentrt.simulate("coding", ["lru", "keep-shallow"], workflows=6, concurrency=2,
                               gpu_blocks=600)
        assert res["keep-shallow"]["hit_rate"] == pytest.approx(res["lru"]["hit_rate"])
        if importlib.util.find_spec("fastapi") is not None:
            from agentrt.serve.runtime_bridge import RuntimeBridge
            assert type(RuntimeBridge("keep-shallow").runtime.policy) is KeepShallow


def test_register_before_any_lookup_keeps_the_builtins():
    """The old trap: register() before the first look-up hid every built-in policy."""
    code = textwrap.dedent("""
        from agentrt.policies.lru import LRUPolicy
        from agentrt.policies.registry import register, policy_names, unregister
        register("mine", LRUPolicy, "registered first")
        names = policy_names()
        assert "mine" in names and "lru" in names and "pbkv-lae" in names, names
        unregister("mine")
        assert "mine" not in policy_names()
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_register_refuses_a_bound_name():
    with pytest.raises(AgentrtError):
        registry.register("belady", LRUPolicy)


# ---------------------------------------------------------------------------- the example, installed
@pytest.fixture(scope="module")
def example_site(tmp_path_factory):
    """examples/agentrt-policy-example pip-installed into a directory of its own."""
    tmp = tmp_path_factory.mktemp("policy-example")
    src = tmp / "src"
    shutil.copytree(EXAMPLE, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    site = tmp / "site"
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(site), str(src)]
    if importlib.util.find_spec("setuptools") is not None:
        cmd.insert(4, "--no-build-isolation")
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert list(site.glob("agentrt_policy_example-*.dist-info"))
    return site


def _env(site: Path) -> dict:
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))


def _run(args: list[str], site: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=_env(site), cwd=ROOT)


@pytest.mark.slow
def test_installed_example_in_cli_and_simulator(example_site):
    agentrt = [sys.executable, "-m", "agentrt.cli"]
    out = _run(agentrt + ["policies"], example_site)
    assert out.returncode == 0, out.stderr
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("prefix-keep"))
    assert "example plugin" in line and "lru" in out.stdout
    out = _run(agentrt + ["bench", "--workload", "coding", "--workflows", "8", "--concurrency", "4",
                          "--gpu-blocks", "800", "--policies", "lru,prefix-keep", "--set",
                          "prefix-keep.keep=4", "--quiet"], example_site)
    assert out.returncode == 0, out.stderr
    assert "prefix-keep" in out.stdout
    # its own tests, against agentrt as installed here
    out = _run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                str(EXAMPLE / "tests")], example_site)
    assert out.returncode == 0 and "2 passed" in out.stdout, out.stdout + out.stderr


@requires_vllm
@pytest.mark.slow
def test_installed_example_in_the_vllm_connector_and_serve(example_site, vllm_servers, vllm_log_dir):
    """The example's policy by name in the connector inside a real vLLM (named by
    `kv_connector` alone), and in `agentrt serve`'s app in front of it."""
    pytest.importorskip("fastapi")
    from agentrt.vllm.eventlog import read_events
    log = vllm_log_dir / "plugin-policy.jsonl"
    kv = {"kv_connector": "AgentRTConnector", "kv_role": "kv_both",
          "kv_connector_extra_config": {"policy": "prefix-keep", "options": {"keep": 4},
                                        "event_log": str(log)}}
    srv = vllm_servers(num_blocks=64, kv_connector=kv,
                       extra_env={"PYTHONPATH": _env(example_site)["PYTHONPATH"]})
    code = textwrap.dedent(f"""
        from fastapi.testclient import TestClient
        from agentrt.serve.app import ServeConfig, create_app
        app = create_app(ServeConfig({srv.base_url!r}, "prefix-keep", act_interval_s=60))
        with TestClient(app) as c:
            assert c.get("/health").json()["policy"] == "prefix-keep"
            for i in range(2):
                r = c.post("/v1/completions", json={{"model": {srv.served_name!r},
                           "prompt": list(range(100, 200)) + [300 + i] * 20, "max_tokens": 2}},
                           headers={{"X-Workflow-Id": "wf-ex", "X-Agent-Id": "coder"}})
                assert r.status_code == 200, r.text
        print("ok")
    """)
    out = _run([sys.executable, "-c", code], example_site)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stdout + out.stderr
    init = [e for e in read_events(str(log), "init") if e["role"] == "scheduler"]
    assert init and init[0]["policy"] == "prefix-keep"
    fin = [f for f in read_events(str(log), "finish") if f["workflow"] == "wf-ex"]
    assert len(fin) == 2 and not read_events(str(log), "error")

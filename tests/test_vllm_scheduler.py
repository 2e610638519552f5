"""agentrt hosted in vLLM's scheduler with no KV connector (`agentrt.vllm.scheduler`): its
arguments, its settings, and a real vLLM server where the policy orders the pool, identity
arrives, and the workers run without a connector."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentrt.errors import AgentrtError
from agentrt.vllm.config import ADDITIONAL_CONFIG_KEY, SCHEDULER_CLS, scheduler_args
from agentrt.wire.identity import xargs_for
from test_vllm_connector import _complete, _tokens, check_live_prefix
from vllm_support import requires_vllm


def test_scheduler_args_carry_the_checked_settings():
    args = scheduler_args("cachesage", event_log="/tmp/x.jsonl")
    assert args[:2] == ["--scheduler-cls", SCHEDULER_CLS] and args[2] == "--additional-config"
    body = json.loads(args[3])[ADDITIONAL_CONFIG_KEY]
    assert body == {"policy": "cachesage", "event_log": "/tmp/x.jsonl"}
    assert scheduler_args("lru", async_scheduling=True)[1] == "agentrt.vllm.scheduler.AgentRTAsyncScheduler"
    with pytest.raises(ValueError, match="host tier"):
        scheduler_args("lru", host_blocks=64)
    with pytest.raises(AgentrtError, match="unknown policy"):
        scheduler_args("no-such-policy")
    with pytest.raises(ValueError, match="offline bound"):
        scheduler_args("belady")


@requires_vllm
def test_both_classes_extend_vllms_own_schedulers():
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.core.sched.scheduler import Scheduler

    from agentrt.vllm import scheduler
    assert issubclass(scheduler.AgentRTScheduler, Scheduler)
    assert issubclass(scheduler.AgentRTAsyncScheduler, AsyncScheduler)
    assert f"{scheduler.__name__}.AgentRTScheduler" == SCHEDULER_CLS


@requires_vllm
def test_settings_come_from_the_additional_config():
    from types import SimpleNamespace as NS

    from agentrt.vllm.scheduler import settings
    assert settings(NS(additional_config={})) == {}
    assert settings(NS(additional_config={"agentrt": {"policy": "lru"}, "other": 1})) == {"policy": "lru"}
    with pytest.raises(ValueError, match="must be an object"):
        settings(NS(additional_config={"agentrt": "pbkv-ta"}))


def _scheduler_server(vllm_servers, log_dir: Path, policy: str):
    log = Path(log_dir) / f"scheduler-{policy}.jsonl"
    return vllm_servers(num_blocks=96, extra_args=scheduler_args(policy, event_log=str(log))), log


@requires_vllm
@pytest.mark.slow
@pytest.mark.parametrize("policy", ["lru", "cachesage"])
def test_hosted_in_the_scheduler_the_policy_orders_the_pool(vllm_servers, vllm_log_dir, policy):
    import httpx

    from agentrt.vllm.eventlog import read_events
    srv, log = _scheduler_server(vllm_servers, vllm_log_dir, policy)
    check_live_prefix(srv, log, policy)
    inits = read_events(str(log), "init")
    assert [i["role"] for i in inits] == ["scheduler"], "a worker built a connector"
    text = Path(srv.log_path).read_text()
    assert "hosted in the scheduler" in text and "Traceback" not in text
    assert "agentrt_connector_" not in httpx.get(srv.base_url + "/metrics", timeout=30).text


@requires_vllm
@pytest.mark.slow
def test_hosted_in_the_scheduler_identity_reaches_the_runtime(vllm_servers, vllm_log_dir):
    from agentrt.vllm.eventlog import read_events
    srv, log = _scheduler_server(vllm_servers, vllm_log_dir, "cachesage")
    _complete(srv, _tokens(600, 100), xargs_for("wf-sched", "verifier", "acme", 2, end=True))
    a = {r["workflow"]: r for r in read_events(str(log), "arrival")}["wf-sched"]
    assert (a["agent"], a["tenant"], a["call"], a["end"]) == ("verifier", "acme", 2, True)
    assert {r["workflow"] for r in read_events(str(log), "finish")} >= {"wf-sched"}


@requires_vllm
def test_the_forward_window_hands_its_last_length_to_the_connector():
    from agentrt.vllm.scheduler import ForwardWindow
    seen = []
    w = ForwardWindow(type("Conn", (), {"during_forward": lambda self, s: seen.append(s)})())
    w.close()                                 # no window open: nothing measured
    w.open()
    w.close()
    w.open()
    assert seen[0] is None and seen[1] is not None and seen[1] >= 0.0
    ForwardWindow(None).open()                # a configured connector of another kind: nothing to call


@requires_vllm
def test_a_model_with_several_kv_cache_groups_is_refused_and_a_configured_connector_kept():
    from types import SimpleNamespace as NS

    from agentrt.vllm.scheduler import host_agentrt
    with pytest.raises(ValueError, match="one KV cache group.*2"):
        host_agentrt(NS(connector=None), NS(additional_config={}), NS(kv_cache_groups=[1, 2]), True)
    other = object()
    sched = NS(connector=other)
    assert host_agentrt(sched, NS(additional_config={}), NS(kv_cache_groups=[1, 2]), True) is None
    assert sched.connector is other

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
    assert json.loads(scheduler_args("lru", metrics_port=0)[3])[ADDITIONAL_CONFIG_KEY]["metrics_port"] == 0
    for bad in (-1, 70000, "9100", True):
        with pytest.raises(ValueError, match="metrics_port"):
            scheduler_args("lru", metrics_port=bad)


def test_metrics_port_is_refused_with_the_connector():
    from agentrt.vllm.config import kv_transfer_config
    with pytest.raises(ValueError, match="vLLM's own /metrics"):
        kv_transfer_config("lru", metrics_port=9100)


def test_side_metrics_serve_the_connector_families_from_the_latest_stats():
    import httpx

    from agentrt.enginebench.prom import parse
    from agentrt.vllm.prom import METRICS
    from agentrt.vllm.side_metrics import SideMetrics
    side = SideMetrics("tiny", "0", "pbkv-ta")
    url = side.serve("127.0.0.1", 0)
    try:
        text = httpx.get(url, timeout=10).text
        for m in METRICS:                   # every family from the start, at 0
            assert f"# TYPE {m.name}{'_total' if m.kind == 'counter' else ''} {m.kind}" in text \
                or f"# TYPE {m.name} {m.kind}" in text
        side.update({"arrived": 7, "steps": 40, "hook_s": 0.002, "evicted": 3, "failed": False})
        got = parse(httpx.get(url, timeout=10).text, ("agentrt_connector_requests_total",
                                                      "agentrt_connector_steps_total",
                                                      "agentrt_connector_evictions_total"))
        assert got["agentrt_connector_requests_total"] == 7 and got["agentrt_connector_steps_total"] == 40
        assert got["agentrt_connector_evictions_total"] == 3       # the reason label's values summed
        line = next(ln for ln in httpx.get(url, timeout=10).text.splitlines()
                    if ln.startswith("agentrt_connector_evictions_total{") and 'reason="reuse"' in ln)
        assert 'engine="0"' in line and 'model_name="tiny"' in line and 'policy="pbkv-ta"' in line
        with pytest.raises(OSError, match=f"metrics_port {side.server.server_port}"):
            SideMetrics("tiny", "0", "lru").serve("127.0.0.1", side.server.server_port)
    finally:
        side.close()


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


_SIDE_PORTS: dict[str, int] = {}     # one metrics port per policy's server (the servers are shared)


def _scheduler_server(vllm_servers, log_dir: Path, policy: str):
    from agentrt.local.launch import free_port
    log = Path(log_dir) / f"scheduler-{policy}.jsonl"
    port = _SIDE_PORTS.setdefault(policy, free_port())
    srv = vllm_servers(num_blocks=96, extra_args=scheduler_args(policy, event_log=str(log), metrics_port=port))
    return srv, log


def _side_metrics(policy: str) -> dict[str, float]:
    from agentrt.enginebench.prom import scrape_now
    return scrape_now(f"http://127.0.0.1:{_SIDE_PORTS[policy]}",
                      ("agentrt_connector_requests_total", "agentrt_connector_steps_total",
                       "agentrt_connector_hook_seconds_total", "agentrt_connector_runtime_failed"))


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
    # ... they are on the scheduler's own port (metrics_port), as the connector has them on vLLM's
    side = httpx.get(f"http://127.0.0.1:{_SIDE_PORTS[policy]}/metrics", timeout=30).text
    assert f'policy="{policy}"' in side and 'model_name="' in side
    m = _side_metrics(policy)
    assert m["agentrt_connector_requests_total"] >= 2 and m["agentrt_connector_steps_total"] > 0
    assert m["agentrt_connector_hook_seconds_total"] > 0 and m["agentrt_connector_runtime_failed"] == 0


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


@requires_vllm
def test_every_hook_point_is_a_method_of_vllms_schedulers_and_the_class_overrides_it():
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.core.sched.scheduler import Scheduler

    from agentrt.vllm.connector import AgentRTConnector
    from agentrt.vllm.scheduler import HOOK_POINTS, AgentRTHooks
    for hook, method in HOOK_POINTS.items():
        assert callable(getattr(AgentRTConnector, hook)), hook
        for base in (Scheduler, AsyncScheduler):
            assert callable(getattr(base, method, None)), f"vLLM's {base.__name__} has no {method}"
        assert method in vars(AgentRTHooks), f"{method} is not overridden"


class _RecordingConnector:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def __getattr__(self, name):
        return lambda *a, **k: self.calls.append((name, *a))


def _hooked(looked_up_status):
    """`AgentRTHooks` on a stand-in for vLLM's scheduler that records what it was asked."""
    from types import SimpleNamespace as NS

    from agentrt.vllm.scheduler import AgentRTHooks

    class Base:
        block_size = 16

        def __init__(self) -> None:
            self.requests: dict = {}
            self.kv_cache_manager = NS(get_block_ids_for_computed_tokens=lambda request_id, num_computed_tokens:
                                       ([1, 2, 3][: num_computed_tokens // 16],))

        def add_request(self, request):
            self.requests[request.request_id] = request

        def _get_local_prefix_cache_hit(self, request):
            return "blocks", 40, 0, False

        def schedule(self):
            self._get_local_prefix_cache_hit(self.requests["a"])
            self.requests["a"].status = looked_up_status
            return "out"

        def _connector_finished(self, request):
            return False, None

        def update_from_output(self, so, mro):
            return "outputs"

        def reset_prefix_cache(self, *a, **k):
            return True

        def get_grammar_bitmask(self, so):
            return None

        def shutdown(self):
            pass

    class Hooked(AgentRTHooks, Base):
        pass

    s = Hooked()
    s._agentrt_attach(_RecordingConnector())
    return s


@requires_vllm
def test_the_hooks_reach_the_connector_where_vllm_calls_a_connectors():
    from types import SimpleNamespace as NS

    from vllm.v1.request import RequestStatus
    s = _hooked(RequestStatus.RUNNING)
    req = NS(request_id="a", status=RequestStatus.WAITING, num_computed_tokens=35)
    s.add_request(req)
    s.add_request(req)                        # a streaming update of a known request: not new
    assert s.schedule() == "out"
    names = [c[0] for c in s._agentrt.calls]
    assert names == ["on_new_request", "get_num_new_matched_tokens", "update_state_after_alloc",
                     "build_connector_meta"]
    assert s._agentrt.calls[1][1:] == (req, 32)         # the local hit in whole blocks, as vLLM gives it
    assert s._agentrt.calls[3][1] == "out"
    s._agentrt.calls.clear()
    s.get_grammar_bitmask("out")
    assert s.update_from_output("out", None) == "outputs"
    assert s._connector_finished(req) == (False, None)
    assert s.reset_prefix_cache() is True
    s.shutdown()
    assert [c[0] for c in s._agentrt.calls] == ["during_forward", "get_kv_connector_stats", "request_finished",
                                                "reset_cache", "shutdown"]
    assert s._agentrt.calls[2][1:] == (req, [1, 2])    # the blocks of its computed tokens, before the free


@requires_vllm
def test_a_request_looked_up_but_not_scheduled_is_not_allocated_and_agentrt_off_adds_nothing():
    from types import SimpleNamespace as NS

    from vllm.v1.request import RequestStatus
    s = _hooked(RequestStatus.WAITING)
    s.add_request(NS(request_id="a", status=RequestStatus.WAITING, num_computed_tokens=0))
    s.schedule()
    assert "update_state_after_alloc" not in [c[0] for c in s._agentrt.calls]
    assert s._agentrt_looked_up == []         # the next step looks it up again
    off = _hooked(RequestStatus.RUNNING)
    off._agentrt_attach(None)
    off.add_request(NS(request_id="a", status=RequestStatus.WAITING, num_computed_tokens=0))
    assert off.schedule() == "out" and off._agentrt_looked_up == []
    off.shutdown()

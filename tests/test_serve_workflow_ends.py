"""`agentrt serve` exports its workflow ends: `agentrt_workflows_ended_total{policy,tenant,reason}`
for client ends (`X-Workflow-End`, the end route), one-call workflows, the caps' forced ends and
the silence sweep's; `agentrt_workflows_open`; per-tenant token counters; bounded label values.
The bridge is driven directly with a fake clock, then once through the real server over HTTP.
"""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("fastapi", reason="the serve extra is not installed")
pytest.importorskip("prometheus_client", reason="the serve extra is not installed")
import httpx  # noqa: E402

from agentrt.serve.identity import resolve_identity  # noqa: E402
from agentrt.serve.metrics import ServeMetrics  # noqa: E402
from agentrt.serve.runtime_bridge import RuntimeBridge  # noqa: E402
from serve_fakes import up, start_serve  # noqa: E402,F401

ENDED = "agentrt_workflows_ended_total"
USAGE = {"prompt_tokens": 100, "prompt_tokens_details": {"cached_tokens": 40}}


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def body(task: str = "go") -> dict:
    return {"model": "m", "messages": [{"role": "system", "content": "You are the planner. " * 20},
                                       {"role": "user", "content": task}]}


def one_call(bridge: RuntimeBridge, clock: Clock, wf: str | None, tenant: str = "default",
             end: bool = False, usage: dict | None = None) -> None:
    h = {"x-agent-id": "planner", "x-tenant-id": tenant, "x-workflow-end": str(end).lower()}
    if wf is not None:
        h["x-workflow-id"] = wf
    b = body() if wf is not None else {"model": "m", "prompt": "You are the planner. " * 20}
    c = bridge.arrive("/v1/chat/completions" if wf else "/v1/completions", b,
                      resolve_identity(h, b, bridge.next_call_number()))
    clock.t += 1.0
    bridge.finish(c, 200, usage)


def ended(bridge: RuntimeBridge, tenant: str, reason: str) -> float:
    v = bridge.metrics.registry.get_sample_value(
        ENDED, {"policy": bridge.policy_name, "tenant": tenant, "reason": reason})
    return v or 0.0


def sample(bridge: RuntimeBridge, name: str, **labels) -> float | None:
    return bridge.metrics.registry.get_sample_value(name, {"policy": bridge.policy_name, **labels})


@pytest.fixture
def bridge_clock():
    clock = Clock()
    return RuntimeBridge("cachesage", clock=clock), clock


def test_client_ends_and_one_call_workflows_are_counted_by_tenant(bridge_clock):
    bridge, clock = bridge_clock
    one_call(bridge, clock, "run-1", "team-a")
    one_call(bridge, clock, "run-1", "team-a", end=True)
    one_call(bridge, clock, "run-1", "team-b", end=True)       # another tenant's run-1
    one_call(bridge, clock, None, "team-b")                     # no workflow, no task: one call
    bridge.end_workflow("team-a/gone", "team-a")                # a workflow it never held
    assert ended(bridge, "team-a", "client") == 1 and ended(bridge, "team-b", "client") == 1
    assert ended(bridge, "team-b", "call") == 1 and ended(bridge, "team-a", "call") == 0
    assert sample(bridge, "agentrt_workflows_open") == 0


def test_cap_ends_are_counted_for_the_tenant_that_lost_a_workflow(bridge_clock):
    bridge, clock = bridge_clock
    rt = bridge.runtime
    rt.max_workflows_per_tenant, rt.max_workflows = 2, 3
    for wf in ("a1", "a2", "a3"):                    # a1 capped out by the tenant cap
        one_call(bridge, clock, wf, "team-a")
    assert ended(bridge, "team-a", "cap") == 1 and sample(bridge, "agentrt_workflows_open") == 2
    one_call(bridge, clock, "b1", "team-b")          # total cap 3: fits
    one_call(bridge, clock, "b2", "team-b")          # over the total cap: team-a's oldest idle goes
    assert ended(bridge, "team-a", "cap") == 2 and ended(bridge, "team-b", "cap") == 0
    assert rt.forced_ends == 2 and sample(bridge, "agentrt_workflows_open") == 3


def test_the_sweep_timer_counts_silent_ends(bridge_clock):
    bridge, clock = bridge_clock
    one_call(bridge, clock, "w1", "team-a")
    one_call(bridge, clock, "w2", "team-b")
    clock.t += bridge.runtime.silent_after_s + 1

    async def a_few_sweeps() -> None:
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(bridge.acts.sweep_loop(0.01), 0.2)

    asyncio.run(a_few_sweeps())
    assert ended(bridge, "team-a", "silent") == 1 and ended(bridge, "team-b", "silent") == 1
    assert bridge.runtime.silent_ends == 2 and sample(bridge, "agentrt_workflows_open") == 0


def test_tenant_token_counters_and_label_caps():
    clock = Clock()
    bridge = RuntimeBridge("lru", clock=clock, max_tenant_labels=2)
    for t in ("t1", "t2", "t3", "t4"):           # t3, t4 past the cap: "other"
        one_call(bridge, clock, f"w-{t}", t, end=True, usage=USAGE)
    assert sample(bridge, "agentrt_tenant_prompt_tokens_total", tenant="t1") == 100
    assert sample(bridge, "agentrt_tenant_cached_tokens_total", tenant="t2") == 40
    assert sample(bridge, "agentrt_tenant_prompt_tokens_total", tenant="other") == 200
    assert ended(bridge, "other", "client") == 2
    assert sample(bridge, ENDED, tenant="t3", reason="client") is None
    m = ServeMetrics("lru")
    m.workflow_ended("t1", "made-up")                # reasons are a fixed set too
    assert m.registry.get_sample_value(ENDED, {"policy": "lru", "tenant": "t1", "reason": "other"}) == 1


def test_a_failing_end_hook_never_fails_the_call(bridge_clock):
    bridge, clock = bridge_clock

    def boom(*a):
        raise RuntimeError("metrics bug")
    bridge.metrics.workflow_ended = boom
    one_call(bridge, clock, "w1", end=True)
    assert "w1" not in bridge.runtime.workflows and bridge.runtime.errors == 1


def test_ends_reach_the_metrics_route(up):
    srv = start_serve(up.url, "cachesage")
    try:
        u = srv.url
        h = {"X-Tenant-Id": "team-a", "X-Agent-Id": "planner", "X-Workflow-Id": "run-1"}
        assert httpx.post(u + "/v1/chat/completions", json=body(), headers=h).status_code == 200
        r = httpx.post(u + "/v1/chat/completions", json=body("next"),
                       headers={**h, "X-Workflow-End": "true"})
        assert r.status_code == 200
        httpx.post(u + "/v1/chat/completions", json=body(), headers={**h, "X-Workflow-Id": "run-2"})
        assert httpx.post(u + "/agentrt/workflows/run-2/end?tenant=team-a").json()["ended"]
        text = httpx.get(u + "/metrics").text
        assert f'{ENDED}{{policy="cachesage",reason="client",tenant="team-a"}} 2.0' in text
        assert 'agentrt_workflows_open{policy="cachesage"} 0.0' in text
        assert 'agentrt_tenant_prompt_tokens_total{policy="cachesage",tenant="team-a"} 300.0' in text
    finally:
        srv.stop()

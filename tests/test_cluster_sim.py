"""The multi-replica simulator: one replica is the single-replica engine, calls are conserved,
runs are deterministic, and a workflow's calls wait on each other across replicas."""

from __future__ import annotations

import subprocess
import sys

import pytest

from agentrt.bench.source import workload_source
from agentrt.cluster.metrics import merge_metrics
from agentrt.cluster.routing import Router
from agentrt.cluster.run import render, run_cluster
from agentrt.cluster.registry import router_names
from agentrt.engine.presets import get_preset
from agentrt.engine.simulator import EngineConfig, Simulator
from agentrt.policies.registry import make_policy
from agentrt.sched.registry import make_scheduler
from agentrt.workloads.base import GenConfig

WALL_CLOCK = ("wall_s", "touches_per_s")


@pytest.fixture(scope="module")
def team():
    src = workload_source("team", GenConfig(workflows=24, rate=4.0, seed=3))
    yield src
    src.close()


@pytest.fixture(scope="module")
def closed():
    src = workload_source("hover", GenConfig(workflows=16, concurrency=8, seed=1))
    yield src
    src.close()


def config(bs: int, gpu: int | None = 1500, host: int = 0) -> EngineConfig:
    return EngineConfig(get_preset("llama3.1-8b-h100"), bs, gpu_blocks=gpu, host_blocks=host)


@pytest.mark.parametrize("policy,scheduler,host", [("lru", "fcfs", 0), ("cachesage", "agent", 3000),
                                                   ("pbkv-lae", "lpm", 0)])
@pytest.mark.parametrize("which", ["team", "closed"])
def test_one_replica_is_the_single_simulator(request, which, policy, scheduler, host):
    src = request.getfixturevalue(which)
    cfg = config(src.header.block_size, host=host)
    sim = Simulator(cfg, make_policy(policy, seed=0), src.eval_calls(), concurrency=src.header.concurrency,
                    scheduler=make_scheduler(scheduler, seed=0), record_stream=False)
    single = sim.run().summary()
    for router in ("round-robin", "agent"):
        cm = run_cluster(src.eval_calls(), 1, router, cfg, policy=policy, scheduler=scheduler,
                         concurrency=src.header.concurrency)
        got = cm.total.summary()
        for k in single:
            if k not in WALL_CLOCK:
                assert got[k] == single[k], (router, k)
        assert cm.imbalance == 1.0
        assert cm.replicas[0].busy_s == sim.busy_s


@pytest.mark.parametrize("router", router_names())
def test_every_call_served_exactly_once(team, router):
    n_calls = team.calls
    cm = run_cluster(team.eval_calls(), 4, router, config(team.header.block_size), seed=0)
    assert cm.total.calls == n_calls
    assert sum(r.calls for r in cm.replicas) == n_calls
    assert sum(r.calls_routed for r in cm.replicas) == n_calls
    assert cm.total.workflows == team.workflows
    assert len(cm.total.ttft) == n_calls
    assert len(cm.total.e2e) == team.workflows
    assert 1.0 <= cm.imbalance <= 4.0


class _Recorder(Router):
    """Round-robin that records what it is told, to check the order of events."""
    name = "recorder"

    def __init__(self) -> None:
        super().__init__()
        self.log: list[tuple] = []
        self.k = 0

    def route(self, request, replicas, now):
        self.log.append(("route", now, request.workflow, request.call_index))
        self.k += 1
        return self.k % len(replicas)

    def on_finished(self, request, replica, now):
        self.log.append(("finished", now, request.workflow, request.call_index))

    def on_workflow_end(self, workflow, tenant, now):
        self.log.append(("end", now, workflow, None))


def test_hooks_in_time_order_and_calls_follow_their_predecessors(closed):
    rec = _Recorder()
    run_cluster(closed.eval_calls(), 3, rec, config(closed.header.block_size))
    times = [t for _, t, _, _ in rec.log]
    assert times == sorted(times)                       # the router's time never goes back
    done: dict[tuple[str, int], float] = {}
    from agentrt.trace.reader import TraceReader
    after = {(c.workflow, c.call): c.after for c in TraceReader(closed.path)}
    for kind, t, wf, call in rec.log:
        if kind == "finished":
            done[(wf, call)] = t
        elif kind == "route":
            for a in after[(wf, call)]:                 # routed only after its predecessors finished
                assert (wf, a) in done and done[(wf, a)] <= t
    ends = [wf for kind, _, wf, _ in rec.log if kind == "end"]
    assert sorted(ends) == sorted(set(ends)) and len(ends) == closed.workflows


def test_merge_metrics_pools_samples():
    cm = run_cluster(iter(()), 2, "round-robin", config(16))
    assert cm.total.calls == 0 and cm.imbalance == 1.0
    m = merge_metrics([])
    assert m.calls == 0 and m.first_arrival is None


def test_render_names_every_router(team):
    cfg = config(team.header.block_size)
    res = {r: run_cluster(team.eval_calls(), 2, r, cfg) for r in ("prefix", "agent")}
    text = render(res, "team")
    assert "prefix" in text and "agent" in text and "imbal" in text


SCRIPT = r"""
import json, sys
from agentrt.bench.source import file_source
from agentrt.cluster.run import run_cluster
from agentrt.engine.presets import get_preset
from agentrt.engine.simulator import EngineConfig
src = file_source(sys.argv[1])
cfg = EngineConfig(get_preset("llama3.1-8b-h100"), src.header.block_size, gpu_blocks=1500)
out = {}
for r in sys.argv[2].split(","):
    s = run_cluster(src.eval_calls(), 3, r, cfg, policy="cachesage").summary()
    for k in ("wall_s", "touches_per_s"):
        s.pop(k)
    out[r] = s
print(json.dumps(out, sort_keys=True))
"""


def test_deterministic_across_hash_seeds(team):
    names = "prefix,session,agent"

    def run(seed: str) -> str:
        env = {"PYTHONHASHSEED": seed, "PATH": "/usr/bin:/bin"}
        return subprocess.run([sys.executable, "-c", SCRIPT, str(team.path), names], env=env,
                              capture_output=True, text=True, check=True).stdout

    assert run("1") == run("2")

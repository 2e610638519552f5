"""Run a trace through N simulated replicas behind a router, and render the result.

`run_cluster` is the one entry point (`agentrt bench --replicas N --router NAME`, the router
benchmark, tests). Every replica gets its own policy instance and scheduler instance, built by
the factories given (or by name from the registries); the engine configuration is the same for
all replicas.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from agentrt.cluster.metrics import ClusterMetrics, cluster_metrics
from agentrt.cluster.registry import make_router
from agentrt.cluster.routing import Router
from agentrt.cluster.sim import ClusterSimulator
from agentrt.cluster.transfer import PeerTransfer
from agentrt.engine.simulator import EngineConfig
from agentrt.engine.tool_hints import ToolHints
from agentrt.runtime.policy import Policy
from agentrt.sched.base import Scheduler
from agentrt.trace.schema import Call


def run_cluster(calls: Iterable[Call], n_replicas: int, router: str | Router, config: EngineConfig, *,
                policy: str = "lru", scheduler: str = "fcfs", concurrency: int | None = None,
                time_scale: float = 1.0, seed: int = 0, router_options: dict | None = None,
                policy_options: dict | None = None, scheduler_options: dict | None = None,
                policy_factory: Callable[[], Policy] | None = None,
                scheduler_factory: Callable[[], Scheduler] | None = None,
                time_routes: bool = False, tool_hints: ToolHints | None = None,
                record_order: bool = False, transfer_gbps: float | None = None,
                record_stream: bool = False, safety_net: bool = True) -> ClusterMetrics:
    """Replay `calls` (consumed once, in file order) on `n_replicas` replicas behind `router`.

    `router`: a name (`agentrt routers`) built with `router_options` and `seed`, or a `Router`.
    `policy` / `scheduler` are names built per replica with their options and `seed`, unless a
    factory is given (e.g. one that trains the policy: `bench.runner.make_trained_policy`).
    `concurrency` / `time_scale` are the replay's (see `engine.replay`). `time_routes` records
    the wall time of every `route` call (`ClusterMetrics.route_s`). `tool_hints`: the framework
    announces its tool times (`engine.tool_hints`). `record_order`: the metrics keep the run's
    placement and each replica's admission order (the cluster oracle's reference, `bounds.py`).
    `transfer_gbps`: replicas copy cached prefixes from each other over a link of that many GB/s
    (`cluster.transfer`); None: independent caches. `record_stream`: the metrics keep every
    replica's block references in one ordered list (`bounds.pooled_bound`'s input).
    `safety_net`: each replica's runtime has the LRU safety net (`runtime/safety_net.py`).
    """
    if isinstance(router, str):
        router = make_router(router, seed=seed, **(router_options or {}))
    if policy_factory is None:
        from agentrt.policies.registry import make_policy
        popts = policy_options or {}

        def policy_factory() -> Policy:
            return make_policy(policy, seed=seed, **popts)
    if scheduler_factory is None:
        from agentrt.sched.registry import make_scheduler
        sopts = scheduler_options or {}

        def scheduler_factory() -> Scheduler:
            return make_scheduler(scheduler, seed=seed, **sopts)
    sim = ClusterSimulator(config, n_replicas, router, iter(calls), policy_factory, scheduler_factory,
                           concurrency=concurrency, time_scale=time_scale, time_routes=time_routes,
                           tool_hints=tool_hints, record_order=record_order,
                           transfer=PeerTransfer(transfer_gbps) if transfer_gbps is not None else None,
                           record_stream=record_stream, safety_net=safety_net)
    sim.run()
    return cluster_metrics(sim)


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e3:.0f}"


def render(results: dict[str, ClusterMetrics], title: str | None = None) -> str:
    """A plain-text table, one row per router: hit rate, TTFT and E2E p50/p99, imbalance."""
    head = f"{'router':14s} {'hit':>6s} {'ttft p50':>9s} {'ttft p99':>9s} {'e2e p50':>9s} " \
           f"{'e2e p99':>9s} {'imbal':>6s} {'calls':>7s}"
    lines = [title] if title else []
    lines += [head + "   (latencies in ms)", "-" * len(head)]
    for name, cm in results.items():
        s = cm.summary()
        lines.append(f"{name:14s} {s['hit_rate']:6.1%} {_ms(s['ttft_p50_s']):>9s} {_ms(s['ttft_p99_s']):>9s} "
                     f"{_ms(s['e2e_p50_s']):>9s} {_ms(s['e2e_p99_s']):>9s} {s['imbalance']:6.2f} "
                     f"{s['calls']:7d}")
    return "\n".join(lines)

"""`agentrt bench --replicas N --router NAME`: every policy on N simulated replicas behind a router.

Each replica is the one-replica engine model with the bench's engine configuration (so
`--gpu-blocks` is per replica), its own instance of the policy (trained on the bench's split,
as a one-replica run would) and of the scheduler. The trace is replayed once per policy with
the same replay settings as `run_bench` (concurrency, time scale). The bounds (`oracle`,
`belady`, `infinite`) are one-replica constructs and are refused here.

The `--json` document has the shape of a one-replica bench document (`docs/output.md`), with
`config.replicas` and `config.router`, and in each policy's result the cluster's own figures:
`n_replicas`, `imbalance` (max / mean busy time over replicas), `router_state` and per-replica
`replicas` rows.
"""

from __future__ import annotations

from dataclasses import asdict

from agentrt.bench.runner import (BenchOptions, ProgressFactory, engine_config,
                                  make_bench_scheduler, make_tool_hints, make_trained_policy,
                                  plan_split)
from agentrt.bench.source import TraceSource
from agentrt.errors import AgentrtError


def check_cluster_run(policies: list[str], replicas: int, router: str | None, cli: bool = True) -> None:
    """Refuse what a cluster run cannot do, before any work."""
    from agentrt.cluster.registry import check_router
    from agentrt.policies.registry import BOUNDS
    flag = "--replicas" if cli else "replicas"
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
        raise AgentrtError(f"{flag} must be an integer >= 1, got {replicas!r}")
    if router is not None:
        check_router(router)
    if replicas > 1:
        bounds = [p for p in policies if p in BOUNDS]
        if bounds:
            raise AgentrtError(f"the bounds ({', '.join(bounds)}) run on one replica only; drop them "
                               f"from the policies or use {flag} 1")


def run_cluster_bench(source: TraceSource, policies: list[str], opts: BenchOptions, replicas: int,
                      router: str, progress: ProgressFactory | None = None) -> dict:
    from agentrt.bench.output import SCHEMA_VERSION
    from agentrt.cluster.run import run_cluster
    opts.validate(policies)
    check_cluster_run(policies, replicas, router)
    split = plan_split(source, policies, opts)
    cfg = engine_config(opts, source.header.block_size)
    conc = opts.concurrency if opts.concurrency is not None else source.header.concurrency
    results: dict[str, dict] = {}
    first = None
    for name in policies:
        cb = progress(name, 1) if progress else None
        cm = run_cluster(source.eval_calls(), replicas, router, cfg, concurrency=conc,
                         time_scale=opts.time_scale, seed=opts.seed, tool_hints=make_tool_hints(opts),
                         policy_factory=lambda name=name: make_trained_policy(name, source, opts),
                         scheduler_factory=lambda: make_bench_scheduler(opts))
        if cb is not None:
            cb(1)
        results[name] = cm.summary()
        first = first or cm
    config = asdict(opts)
    config.update(block_size=source.header.block_size, gpu_blocks=cfg.gpu_blocks,
                  block_bytes=cfg.block_bytes, concurrency=conc, bounds_stream=None,
                  oracle_passes=None, train=split, replicas=replicas, router=router)
    return {"schema_version": SCHEMA_VERSION, "trace": source.label, "calls": first.total.calls,
            "workflows": first.total.workflows, "config": config, "results": results,
            "lru_reference": None}

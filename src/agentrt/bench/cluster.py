"""`agentrt bench --replicas N --router NAME`: every policy on N simulated replicas behind a router.

Each replica is the one-replica engine model with the bench's engine configuration (so
`--gpu-blocks` is per replica), its own instance of the policy (trained on the bench's split,
as a one-replica run would) and of the scheduler. The trace is replayed once per policy with
the same replay settings as `run_bench` (concurrency, time scale). `oracle` is the cluster
oracle (`cluster.bounds`): clairvoyant eviction on every replica, on the placement the router
made in the run with the most hits (`config.oracle_reference`; an LRU run when `oracle` is the
only policy): a bound on eviction for that placement, not on routing. `belady` is the pooled
bound (`cluster.bounds.pooled_bound`): MIN over the block stream the LRU run recorded on all
replicas, with N x a replica's GPU blocks as one pool: a bound on routing and eviction together
(and on free peer copies) for that stream, which ignores the memory running requests hold;
`belady-held` is the same keeping the blocks the LRU run's running calls held (`bounds.held`).
`infinite` is MIN without a memory limit (the routers' ceiling). LRU runs for them when not
asked (`config.bounds_stream`). `--transfer-gbps G`: replicas copy cached prefixes from each
other's GPUs over a link of G GB/s (`cluster.transfer`); the oracle is not a bound with it and
is refused (the offline bounds still hold: they count peer copies as free).

The `--json` document has the shape of a one-replica bench document (`docs/output.md`), with
`config.replicas`, `config.router` and `config.transfer_gbps`, and in each policy's result the cluster's own figures:
`n_replicas`, `imbalance` (max / mean busy time over replicas), `router_state` and per-replica
`replicas` rows.
"""

from __future__ import annotations

from dataclasses import asdict

from agentrt.bench.runner import (BenchOptions, ProgressFactory, engine_config, offline_row,
                                  replay_concurrency, make_bench_scheduler, make_tool_hints,
                                  make_trained_policy, plan_split)
from agentrt.bench.source import TraceSource
from agentrt.errors import AgentrtError
from agentrt.policies.registry import BOUNDS, SIM_BOUNDS


MAX_REPLICAS = 1024      # simulated replicas: each holds its own cache, runtime and scheduler


def check_cluster_run(policies: list[str], replicas: int, router: str | None, cli: bool = True,
                      transfer_gbps: float | None = None) -> None:
    """Refuse what a cluster run cannot do, before any work."""
    from agentrt.cluster.registry import check_router
    flag = "--replicas" if cli else "replicas"
    if isinstance(replicas, bool) or not isinstance(replicas, int) or not 1 <= replicas <= MAX_REPLICAS:
        raise AgentrtError(f"{flag} must be an integer from 1 to {MAX_REPLICAS:,}, got {replicas!r}")
    if transfer_gbps is not None:
        tflag = "--transfer-gbps" if cli else "transfer_gbps"
        if isinstance(transfer_gbps, bool) or not isinstance(transfer_gbps, (int, float)) \
                or not 0 < transfer_gbps < float("inf"):
            raise AgentrtError(f"{tflag} must be a number > 0 (GB/s), got {transfer_gbps!r}")
        if replicas < 2:
            raise AgentrtError(f"{tflag} needs {flag} 2 or more (a replica copies KV from its peers)")
        if any(p in SIM_BOUNDS for p in policies):
            raise AgentrtError(f"the cluster oracle is not a bound with peer transfer (each replica's "
                               f"future is its own): drop 'oracle' from the policies or {tflag}")
    if router is not None:
        check_router(router)
        if replicas < 2:
            rflag = "--router" if cli else "router"
            raise AgentrtError(f"{rflag} needs {flag} 2 or more (it spreads calls over replicas)")


def run_cluster_bench(source: TraceSource, policies: list[str], opts: BenchOptions, replicas: int,
                      router: str, progress: ProgressFactory | None = None,
                      transfer_gbps: float | None = None, router_options: dict | None = None) -> dict:
    from agentrt.bench.output import SCHEMA_VERSION
    from agentrt.cluster.run import run_cluster
    opts.validate(policies)
    check_cluster_run(policies, replicas, router, transfer_gbps=transfer_gbps)
    split = plan_split(source, policies, opts)
    cfg = engine_config(opts, source.header.block_size)
    conc = replay_concurrency(opts.concurrency, source)
    want_oracle = any(p in SIM_BOUNDS for p in policies)
    offline = [p for p in policies if p in BOUNDS and p not in SIM_BOUNDS]
    online = [p for p in policies if p not in BOUNDS]
    if "lru" not in online and (offline or not online):
        online = ["lru"] + online          # run for the bounds, hidden from the results
    runs = {}
    for name in online:
        cb = progress(name, 1) if progress else None
        runs[name] = run_cluster(source.eval_calls(), replicas, router, cfg, concurrency=conc,
                                 time_scale=opts.time_scale, seed=opts.seed, tool_hints=make_tool_hints(opts),
                                 policy_factory=lambda name=name: make_trained_policy(name, source, opts),
                                 scheduler_factory=lambda: make_bench_scheduler(opts), record_order=want_oracle,
                                 transfer_gbps=transfer_gbps, router_options=router_options,
                                 record_stream=bool(offline) and name == "lru",
                                 safety_net=opts.safety_net)
        if cb is not None:
            cb(1)
    results = {name: cm.summary() for name, cm in runs.items() if name in policies}
    oracle_passes = oracle_ref = None
    if want_oracle:
        from agentrt.cluster.bounds import oracle_on_placement
        # on the placement of the run with the most hits: the oracle then bounds the best policy's
        # eviction (other runs placed calls differently, see cluster.bounds)
        shown = [k for k in online if k in policies] or ["lru"]
        oracle_ref = max(shown, key=lambda k: (runs[k].total.gpu_hit_tokens, -shown.index(k)))
        cb = progress("oracle", 1) if progress else None
        bound, oracle_passes = oracle_on_placement(
            list(source.eval_calls()), runs[oracle_ref], cfg, lambda: make_bench_scheduler(opts),
            concurrency=conc, time_scale=opts.time_scale, seed=opts.seed, tool_hints=make_tool_hints(opts))
        if cb is not None:
            cb(1)
        results["oracle"] = dict(bound.summary(), bound=True)
    if offline:
        from agentrt.cluster.bounds import pooled_bound
        for name in offline:
            results[name] = offline_row(pooled_bound(runs["lru"], cfg, name))
    results = {p: results[p] for p in policies}
    first = next(iter(runs.values()))
    config = asdict(opts)
    config.update(block_size=source.header.block_size, gpu_blocks=cfg.gpu_blocks,
                  block_bytes=cfg.block_bytes, concurrency=conc,
                  bounds_stream="lru" if offline else None,
                  oracle_passes=oracle_passes, oracle_reference=oracle_ref, train=split,
                  replicas=replicas, router=router, router_options=dict(router_options or {}),
                  transfer_gbps=transfer_gbps)
    return {"schema_version": SCHEMA_VERSION, "trace": source.label, "calls": first.total.calls,
            "workflows": first.total.workflows, "config": config, "results": results,
            "lru_reference": runs["lru"].summary() if "lru" not in policies and offline else None}

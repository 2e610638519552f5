"""The bench run the command line asks for: `agentrt bench`'s flags turned into a checked
`BenchSpec` (defaults filled in, every value validated), before anything is generated or
replayed. The command itself (`cli.bench`) only prints and writes what the spec's run returns.
"""

from __future__ import annotations

from pathlib import Path

from agentrt import defaults
from agentrt.errors import AgentrtError
from agentrt.options import scheduler_options

DEFAULT_POLICIES = ",".join(defaults.RUN_POLICIES)
DEFAULT_VLLM_POLICIES = ",".join(defaults.VLLM_POLICIES)
PBKV_PREDICTING = ("pbkv-he", "pbkv", "pbkv-aggressive", "pbkv-ta")


def split_names(s: str) -> list[str]:
    """A comma-separated list of names, blanks dropped."""
    return [p.strip() for p in s.split(",") if p.strip()]


def bench_spec(*, trace: Path | None, workload: str | None, policies: str | None, engine: str,
               gpu_blocks: int | None, host_blocks: int, preset: str, seed: int, workflows: int,
               concurrency: int | None, tool_scale: float, time_scale: float, json_path: Path | None,
               csv_path: Path | None, plot: Path | None, train: Path | None,
               train_fraction: float | None, predictor: Path | None, predictor_kind: str,
               predictor_noise: float, set_: list[str], scheduler: str, max_wait: float | None,
               max_hold: float | None, tenant_weights: str | None, replicas: int = 1,
               router: str | None = None, shared_chunk_tokens: int | None = None,
               tool_hints: float | None = None, transfer_gbps: float | None = None,
               prefix_hold: bool = True, cache_at: str | None = None, router_set: list[str] | None = None,
               preset_file: Path | None = None, retain_hints: float | None = None,
               retain_budget: float = 0.25,
               safety_net: bool = True):
    """The bench run the command line asks for, with the defaults filled in and every value
    checked (`BenchSpec.validate`); nothing generated or replayed yet."""
    from agentrt.bench.runner import BenchOptions
    from agentrt.bench.spec import BenchSpec
    from agentrt.options import parse_policy_options
    from agentrt.policies.registry import check_names
    if engine not in ("sim", "vllm"):
        raise AgentrtError(f"--engine must be sim or vllm, got {engine!r}")
    if engine == "vllm" and (replicas != 1 or router is not None or transfer_gbps is not None or router_set):
        raise AgentrtError("--replicas, --router, --router-set and --transfer-gbps are for the simulator; for real "
                           "replicas see docs/ray.md")
    if engine == "vllm" and not safety_net:
        raise AgentrtError("--no-safety-net is for the simulator (the vLLM connector takes "
                           "\"safety_net\": false in its kv_connector_extra_config)")
    if engine == "vllm" and cache_at is not None:
        raise AgentrtError("--cache-at is for the simulator (vLLM itself caches blocks when they are scheduled)")
    if retain_hints is not None and (engine != "sim" or replicas != 1):
        raise AgentrtError("--retain-hints is for the simulator with one replica (live, a client sends "
                           "kv.retain itself: docs/vllm.md, Retention hints)")
    if retain_budget != 0.25 and retain_hints is None:
        raise AgentrtError("--retain-budget bounds what --retain-hints retains; give both")
    if trace is not None and workload is not None:
        raise AgentrtError("give either --trace or --workload, not both")
    if trace is not None and (workflows != defaults.WORKFLOWS or tool_scale != 1.0):
        raise AgentrtError("--workflows and --tool-scale shape a generated workload; with --trace they "
                           "would be ignored (generate a trace with `agentrt generate` to change them)")
    default_run = trace is None and workload is None
    default_policies = policies is None
    if default_policies:
        policies = DEFAULT_VLLM_POLICIES if engine == "vllm" else DEFAULT_POLICIES
    if default_run and engine == "sim":
        if gpu_blocks is None:
            gpu_blocks = defaults.RUN_GPU_BLOCKS
        if plot is None and json_path is None and csv_path is None:
            plot = Path(defaults.RUN_PLOT)
    names = split_names(policies)
    if replicas > 1 and default_policies:
        from agentrt.policies.registry import SIM_BOUNDS
        # the cluster oracle is not a bound with peer transfer; the offline bounds (over pooled
        # memory) still are
        names = [n for n in names if n not in SIM_BOUNDS or transfer_gbps is None]
    if not names:
        raise AgentrtError("--policies is empty")
    check_names(names)
    from agentrt.options import split_set
    set_, sched_items, router_items = split_set(set_)
    router_set = list(router_set or []) + router_items      # --router-set is the alias of --set router.
    popts = parse_policy_options(set_, names)
    for name in names:
        if name in PBKV_PREDICTING and engine == "sim":
            o = popts.setdefault(name, {})
            o.setdefault("predictor_kind", predictor_kind)
            o.setdefault("predictor_noise", predictor_noise)
            if predictor is not None:
                o.setdefault("predictor", str(predictor))
    if predictor is not None and not any(n in PBKV_PREDICTING for n in names):
        raise AgentrtError(f"--predictor is for {', '.join(PBKV_PREDICTING)}; none is in --policies")
    shaped = [f for f, on in (("--predictor-kind", predictor_kind != "graphsage"),
                              ("--predictor-noise", predictor_noise != 0.0)) if on]
    if shaped and engine != "sim":
        raise AgentrtError(f"{' and '.join(shaped)} {'shapes' if len(shaped) == 1 else 'shape'} the simulator's PBKV predictor; with --engine vllm "
                           f"the connector trains its own on the training split and they would be ignored")
    if shaped and not any(n in PBKV_PREDICTING for n in names):
        raise AgentrtError(f"{' and '.join(shaped)} {'is' if len(shaped) == 1 else 'are'} for "
                           f"{', '.join(PBKV_PREDICTING)}; none is in --policies")
    if preset_file is not None:
        if engine != "sim" and scheduler == "fcfs":
            raise AgentrtError("--preset-file describes an engine for the simulator; with --engine vllm "
                               "the engine is measured, not modelled (with --scheduler it gives the "
                               "admission gate its prefill times)")
        if preset != defaults.PRESET:
            raise AgentrtError("give either --preset or --preset-file, not both")
        from agentrt.engine.preset_file import load_preset_file
        if cache_at is None:             # the measured engine's own caching point
            cache_at = load_preset_file(preset_file).cache_at
    opts = BenchOptions(preset=preset, gpu_blocks=gpu_blocks, host_blocks=host_blocks,
                        preset_file=str(preset_file) if preset_file is not None else None,
                        concurrency=concurrency, seed=seed, train_fraction=train_fraction,
                        time_scale=time_scale, train_path=str(train) if train else None,
                        policy_options=popts, scheduler=scheduler, tool_hints=tool_hints,
                        retain_hints=retain_hints, retain_budget=retain_budget,
                        cache_at="prefill" if cache_at is None else cache_at,
                        safety_net=safety_net,
                        scheduler_options=scheduler_options(scheduler, max_wait, tenant_weights,
                                                            max_hold, shared_chunk_tokens, prefix_hold,
                                                            sched_items))
    spec = BenchSpec(policies=names, trace=trace,
                     workload=(workload or defaults.RUN_WORKLOAD) if trace is None else None,
                     workflows=workflows, tool_scale=tool_scale, options=opts, json_path=json_path,
                     csv_path=csv_path, plot_path=plot, replicas=replicas, router=router,
                     transfer_gbps=transfer_gbps, router_options=router_options(router_set or [], replicas, router))
    spec.validate()
    return spec


def router_options(items: list[str], replicas: int, router: str | None) -> dict:
    """`--router-set` items for the run's router (the default one when --router is not given)."""
    if not items:
        return {}
    if replicas < 2:
        raise AgentrtError("--router-set and --set router.OPTION need --replicas 2 or more (they configure the router)")
    from agentrt.cluster.registry import DEFAULT_ROUTER
    from agentrt.options import parse_router_options
    return parse_router_options(items, router or DEFAULT_ROUTER)     # an unknown router is refused there

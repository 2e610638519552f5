"""Run a list of policies over one trace source and collect the `--json` result document.

Every real policy replays the same trace through its own `Simulator`. The in-simulator bound
(`oracle`) replays it too, under a clairvoyant eviction policy whose reference order comes from the
LRU replay. The offline bounds (`belady`, `infinite`) are computed over the block-access stream of
the LRU replay (LRU is run for that even when not asked for) at the same GPU capacity; they report
hit rates and prefill tokens, and no timings, since they are not engines.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePath

from agentrt import defaults
from agentrt.bench.output import SCHEMA_VERSION
from agentrt.bench.source import TraceSource
from agentrt.bounds import offline_bound
from agentrt.engine.presets import get_preset
from agentrt.engine.simulator import CACHE_AT, EngineConfig, Simulator
from agentrt.errors import AgentrtError
from agentrt.policies.registry import BOUNDS, SIM_BOUNDS, check_names, make_policy


@dataclass(slots=True)
class BenchOptions:
    """How every policy of one bench run replays the trace. `validate` is the one check of these
    values (the CLI, `agentrt.simulate` and `run_bench` all call it) before any replay."""
    preset: str = defaults.PRESET
    preset_file: str | None = None     # an engine measured by `agentrt calibrate` (replaces `preset`)
    gpu_blocks: int | None = None
    host_blocks: int = 0
    concurrency: int | None = None     # override the trace's closed-loop concurrency
    time_scale: float = 1.0            # stretch trace timestamps (open-loop request rate / F)
    max_batch_tokens: int = 8192
    max_running: int = 256
    seed: int = 0
    train_fraction: float | None = None   # hold back this share of workflows for offline training
    train_path: str | None = None         # or train on this separate trace
    policy_options: dict = field(default_factory=dict)   # {policy: {option: value}}
    scheduler: str = defaults.SCHEDULER   # admission order (agentrt.sched)
    scheduler_options: dict = field(default_factory=dict)
    tool_hints: float | None = None    # the framework announces tool times, with this lognormal error
    retain_hints: float | None = None  # it sends kv.retain for a tool call's context, durations with this error
    retain_budget: float = 0.25        # the most of the GPU blocks retained at once
    cache_at: str = "prefill"          # when computed prompt blocks become hits (EngineConfig)
    safety_net: bool = True            # the runtime's LRU safety net (runtime/safety_net.py)

    def validate(self, policies: list[str], cli: bool = False) -> None:
        """Raise `AgentrtError` on the first bad value, naming it as the user wrote it (`cli`:
        `--gpu-blocks`, else `gpu_blocks`). Builds each policy once with its options (cheap, no
        training) so that a bad option value fails here, not in the middle of the run."""
        from agentrt.checks import flag, input_file, positive
        from agentrt.options import check_policy_options
        if not policies:
            raise AgentrtError(f"{flag('policies', cli)} is empty" if cli else "no policies given")
        check_names(policies)
        get_preset(self.preset)
        if self.preset_file is not None:
            self.measured()
        positive(self.gpu_blocks, "gpu_blocks", cli)
        positive(self.host_blocks, "host_blocks", cli, allow_zero=True)
        positive(self.concurrency, "concurrency", cli)
        from agentrt.trace.limits import MAX_CONCURRENCY
        if self.concurrency is not None and self.concurrency > MAX_CONCURRENCY:
            raise AgentrtError(f"{flag('concurrency', cli)} must be at most {MAX_CONCURRENCY:,}, got {self.concurrency}")
        positive(self.time_scale, "time_scale", cli)
        positive(self.max_batch_tokens, "max_batch_tokens", cli)
        positive(self.max_running, "max_running", cli)
        positive(self.tool_hints, "tool_hints", cli, allow_zero=True)
        positive(self.retain_hints, "retain_hints", cli, allow_zero=True)
        if not 0.0 < self.retain_budget <= 1.0:
            raise AgentrtError(f"{flag('retain_budget', cli)} must be in (0, 1], got {self.retain_budget}")
        if self.cache_at not in CACHE_AT:
            raise AgentrtError(f"{flag('cache_at', cli)} must be one of {', '.join(CACHE_AT)}, got {self.cache_at!r}")
        positive(self.seed, "seed", cli, allow_zero=True)
        if self.train_fraction is not None and not 0.0 <= self.train_fraction < 1.0:
            raise AgentrtError(f"{flag('train_fraction', cli)} must be in [0, 1), got {self.train_fraction}")
        if self.train_path is not None:
            from agentrt.trace.reader import TraceReader
            TraceReader(input_file(self.train_path, flag("train", cli)))   # header checked here
        check_policy_options(self.policy_options, policies, cli)
        for name in policies:
            if name in BOUNDS:
                continue
            opts = dict(self.policy_options.get(name, {}))
            path = opts.pop("predictor", None)
            if isinstance(path, (str, PurePath)):
                input_file(path, "--predictor" if cli else f"policy_options['{name}']['predictor']")
            try:
                make_policy(name, seed=self.seed, **opts)
            except ValueError as e:
                raise AgentrtError(f"bad option for policy '{name}': {e}") from None
        make_bench_scheduler(self)

    def measured(self):
        """The preset file's contents (`engine/preset_file.py`), None without one; read once."""
        if self.preset_file is None:
            return None
        from agentrt.engine.preset_file import load_preset_file
        cached = _PRESET_FILES.get(self.preset_file)
        if cached is None:
            cached = _PRESET_FILES[self.preset_file] = load_preset_file(self.preset_file)
        return cached


_PRESET_FILES: dict = {}       # path -> PresetFile, read once per process


ProgressFactory = Callable[[str, int], Callable[[int], None]]


def replay_concurrency(override: int | None, source: TraceSource) -> int | None:
    """The closed-loop concurrency a replay uses: the one asked for, else the trace header's
    (None: open loop)."""
    return override if override is not None else source.header.concurrency


def engine_config(opts: BenchOptions, block_size: int) -> EngineConfig:
    """The simulated engine: a named preset, or a measured one (its costs, KV pool and scheduler
    limits; the capacity in this trace's blocks unless `gpu_blocks` says otherwise)."""
    pf = opts.measured()
    if pf is not None:
        return EngineConfig(preset=pf.preset, block_size=block_size, gpu_blocks=opts.gpu_blocks,
                            host_blocks=opts.host_blocks, max_batch_tokens=pf.max_batch_tokens,
                            max_running=pf.max_running, cache_at=opts.cache_at,
                            request_overhead_s=pf.request_overhead_s,
                            request_overhead_per_stream_s=pf.request_overhead_per_stream_s,
                            host_per_call_s=pf.host_per_call_s)
    return EngineConfig(preset=get_preset(opts.preset), block_size=block_size,
                        gpu_blocks=opts.gpu_blocks, host_blocks=opts.host_blocks,
                        max_batch_tokens=opts.max_batch_tokens, max_running=opts.max_running,
                        cache_at=opts.cache_at)




def make_bench_scheduler(opts: BenchOptions):
    from agentrt.sched.registry import make_scheduler
    return make_scheduler(opts.scheduler, seed=opts.seed, **opts.scheduler_options)


def make_tool_hints(opts: BenchOptions):
    """The simulated framework's tool-time announcements (`engine.tool_hints`), None if off."""
    from agentrt.engine.tool_hints import ToolHints
    return ToolHints.maybe(opts.tool_hints, opts.seed)


def make_retain_hints(opts: BenchOptions):
    """The simulated framework's kv.retain hints over tool calls (`engine.tool_hints`), None if off."""
    from agentrt.engine.tool_hints import RetainHints
    return RetainHints.maybe(opts.retain_hints, opts.seed, opts.retain_budget)


def make_trained_policy(name: str, source: TraceSource, opts: BenchOptions):
    """A policy by name, trained on the bench's training split (or --train file) if it learns offline.

    PBKV variants asking for the same predictor (kind, horizon, split, seed) share one training run
    (cached on the source, so one bench run never reuses what another trained).
    """
    policy = make_policy(name, seed=opts.seed, **opts.policy_options.get(name, {}))
    if not policy.needs_training:
        return policy
    key = None
    if hasattr(policy, "use_predictor"):
        key = (source.train_workflows, opts.train_path, policy.predictor_kind, policy.horizon,
               opts.seed, policy.train_epochs)
        if key in source.trained:
            policy.use_predictor(source.trained[key])
            return policy
    if opts.train_path:
        from agentrt.trace.reader import TraceReader
        train = TraceReader(opts.train_path)
        policy.train(iter(train), train.header.block_size)
    else:
        policy.train(source.train_calls(), source.header.block_size)
    if key is not None and policy.predictor is not None:
        source.trained[key] = policy.predictor
    return policy


def run_policy(source: TraceSource, name: str, opts: BenchOptions, record_stream: bool = False,
               progress: Callable[[int], None] | None = None, record_calls: bool = False) -> Simulator:
    """One policy's replay (`record_calls`: keep each call's times, `sim.metrics.call_log`)."""
    cfg = engine_config(opts, source.header.block_size)
    policy = make_trained_policy(name, source, opts)
    conc = replay_concurrency(opts.concurrency, source)
    sim = Simulator(cfg, policy, source.eval_calls(), concurrency=conc,
                    record_stream=record_stream, progress=progress, time_scale=opts.time_scale,
                    scheduler=make_bench_scheduler(opts), tool_hints=make_tool_hints(opts),
                    retain=make_retain_hints(opts),
                    safety_net=opts.safety_net, record_calls=record_calls)
    sim.run()
    return sim


def net_summary(sim) -> dict | None:
    """The safety net's figures for a policy's result (`safety_net` in the JSON): None without a
    net (LRU, the bounds, `--no-safety-net`)."""
    net = sim.runtime.net
    if net is None:
        return None
    st = net.stats()
    span = sim.metrics.last_finish - (sim.metrics.first_arrival or 0.0)
    return {"fallbacks": st["net_fallbacks"], "probes": st["net_probes"],
            "fallback_s": st["net_fallback_s"],
            "fallback_share": min(1.0, st["net_fallback_s"] / span) if span > 0 else 0.0,
            "sampled_blocks": st["net_sampled_blocks"], "sampled_hit_rate": st["net_real_hit"],
            "shadow_lru_hit_rate": st["net_lru_hit"], "sampling_rate": st["net_sampling_rate"]}


def plan_split(source: TraceSource, policies: list[str], opts: BenchOptions) -> dict | None:
    """Hold back training workflows when a requested policy learns offline (see docs/notes/results-details.md),
    and every workflow a given saved predictor was trained on (bench.source.predictor_holdback)."""
    from agentrt.bench.source import predictor_holdback, warn_no_identity
    from agentrt.policies.registry import policy_class
    classes = {p: policy_class(p) for p in policies}
    # PBKV's needs_training is a property (it trains unless given a predictor): on the class it is
    # truthy, so the default split does not depend on --predictor and runs stay comparable
    needs = any(c is not None and c.needs_training for c in classes.values())
    warn_no_identity(source, [p for p, c in classes.items()
                              if c is not None and (c.needs_tags or c.wants_events or c.needs_training)])
    frac = opts.train_fraction
    if frac is None:
        frac = defaults.TRAIN_FRACTION if needs and not opts.train_path else 0.0
    k = 0 if opts.train_path else source.split_size(frac)
    paths = [str(o["predictor"]) for p, o in opts.policy_options.items()
             if p in classes and isinstance(o.get("predictor"), (str, PurePath))]
    k, notes = predictor_holdback(source, list(dict.fromkeys(paths)), k)
    source.train_workflows = k
    split = {"source": opts.train_path, "workflows": k or None} if opts.train_path else None
    if k and not opts.train_path:
        split = {"source": f"first {k} of {source.workflows} workflows of the trace", "workflows": k}
    learners = [p for p, c in classes.items() if c is not None and c.needs_training
                and not (p in opts.policy_options and opts.policy_options[p].get("predictor"))]
    if not k and not opts.train_path and learners:
        # asked for, but nothing to learn from: say so instead of "no policy learns offline"
        split = {"source": None, "workflows": 0,
                 "untrained": learners}
        _warn(f"no workflow is held back for training ({'--train-fraction 0' if frac == 0 else 'too few workflows'}): "
              f"{', '.join(learners)} run untrained")
    if opts.train_path and source.path is not None and _same_file(opts.train_path, source.path):
        _warn(f"--train {opts.train_path} is the trace being scored: offline learners are scored on "
              f"the workflows they were trained on (use --train-fraction for a held-out split)")
    if split is not None and notes:
        split["note"] = "; ".join(notes)
    warn_time_scale(source, opts)
    return split


def warn_time_scale(source: TraceSource, opts: BenchOptions) -> None:
    """`--time-scale` stretches trace timestamps; a closed loop starts workflows as others finish
    and spaces calls by their think times, which it does not stretch."""
    conc = replay_concurrency(opts.concurrency, source)
    if conc and opts.time_scale != 1.0:
        _warn(f"--time-scale {opts.time_scale:g} stretches the trace's timestamps, but this replay is "
              f"closed loop ({conc} workflows at once): it starts workflows as others finish and "
              f"does not stretch think or tool times, so only release timestamps on later calls "
              f"move (for generated workloads, --tool-scale stretches tool times)")


def _warn(msg: str) -> None:
    import warnings

    from agentrt.bench.source import BenchWarning
    warnings.warn(msg, BenchWarning, stacklevel=3)


def _same_file(a, b) -> bool:
    try:
        return Path(a).resolve() == Path(b).resolve()
    except OSError:
        return False


def run_oracle(source: TraceSource, opts: BenchOptions, order: list[tuple[str, int]],
               passes: int = 2, progress: Callable[[int], None] | None = None) -> tuple[Simulator, int]:
    """The in-simulator clairvoyant bound: replay under `OraclePolicy`, up to `passes` times,
    the first on the reference order `order` (an earlier replay's admission order), the best pass
    kept (`policies.oracle.best_of_passes`). Returns (the best pass's simulator, passes run).
    """
    from agentrt.policies.oracle import FutureUses, OraclePolicy, best_of_passes
    cfg = engine_config(opts, source.header.block_size)
    conc = replay_concurrency(opts.concurrency, source)

    def replay(ref: list[tuple[str, int]], i: int):
        future = FutureUses(source.eval_calls(), ref, source.header.block_size)
        sim = Simulator(cfg, OraclePolicy(future, seed=opts.seed), source.eval_calls(),
                        concurrency=conc, record_stream=True, time_scale=opts.time_scale,
                        progress=progress if i == 0 else None, scheduler=make_bench_scheduler(opts))
        sim.run()
        return sim.metrics.gpu_hit_tokens, sim, sim.admitted
    return best_of_passes(order, passes, replay)


def offline_row(b) -> dict:
    """An offline bound's result: hit rates and prefill tokens; no engine, so no timings."""
    untimed = ("ttft_mean_s", "ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "tpot_mean_s", "tpot_p50_s",
               "tpot_p90_s", "tpot_p99_s", "e2e_mean_s", "e2e_p50_s", "e2e_p90_s", "e2e_p99_s",
               "throughput_tok_s")
    return {"hit_rate": b.hit_rate, "host_hit_rate": 0.0,
            "prefill_tokens": b.prompt_tokens - b.hit_tokens,
            **dict.fromkeys(untimed), "bound": True, "offline": True}


def run_bench(source: TraceSource, policies: list[str], opts: BenchOptions,
              progress: ProgressFactory | None = None) -> dict:
    opts.validate(policies)         # a bad name or value fails before any replay
    split = plan_split(source, policies, opts)
    bs = source.header.block_size
    cfg = engine_config(opts, bs)
    want_bounds = [p for p in policies if p in BOUNDS]
    real = [p for p in policies if p not in BOUNDS]
    if want_bounds and "lru" not in real:
        real = ["lru"] + real
        hidden_lru = True
    else:
        hidden_lru = False
    results: dict[str, dict] = {}
    eval_calls = source.eval_calls_count if progress else 0
    stream = order = holds = None
    sims = {}
    for name in real:
        cb = progress(name, eval_calls) if progress else None
        sim = run_policy(source, name, opts, record_stream=(name == "lru" and bool(want_bounds)),
                         progress=cb)
        sims[name] = sim
        if name == "lru":
            stream, order, holds = sim.stream, sim.admitted, sim.holds
        if not (hidden_lru and name == "lru"):
            results[name] = sim.metrics.summary()
            results[name]["busy_s"] = sim.busy_s
            net = net_summary(sim)
            if net is not None:
                results[name]["safety_net"] = net
    lru_metrics = sims["lru"].metrics if "lru" in sims else None
    oracle_passes = None
    for name in want_bounds:
        if name in SIM_BOUNDS:
            cb = progress(name, eval_calls) if progress else None
            sim, oracle_passes = run_oracle(source, opts, order, progress=cb)
            results[name] = dict(sim.metrics.summary(), bound=True)
        else:
            results[name] = offline_row(offline_bound(name, stream, holds, bs, cfg.gpu_blocks))
    ordered = {p: results[p] for p in policies}
    first = next(iter(sims.values())).metrics
    config = asdict(opts)
    config.update(block_size=bs, gpu_blocks=cfg.gpu_blocks,
                  block_bytes=cfg.block_bytes,
                  concurrency=replay_concurrency(opts.concurrency, source),
                  bounds_stream="lru" if want_bounds else None, oracle_passes=oracle_passes,
                  train=split)
    pf = opts.measured()
    if pf is not None:     # the measured engine the run stood for, named in the table's header
        config.update(preset=pf.preset.name, max_batch_tokens=cfg.max_batch_tokens,
                      max_running=cfg.max_running,
                      measured_preset={k: pf.doc[k] for k in ("name", "command", "engine", "costs",
                                                              "request_overhead_s", "request_overhead_per_stream_s",
                                                              "host_per_call_s")
                                    if k in pf.doc})
    return {"schema_version": SCHEMA_VERSION, "trace": source.label, "calls": first.calls, "workflows": first.workflows,
            "config": config, "results": ordered,
            "lru_reference": lru_metrics.summary() if hidden_lru and lru_metrics else None}

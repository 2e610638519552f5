"""The `agentrt` command line.

User errors (a bad value, an unknown name, a missing file, and every parser error: an unknown
command, a value of the wrong type, a missing argument) print one line, `error: ...`, on stderr
and exit with status 2, with no traceback and no usage text; options are checked before any work
starts (bench: `BenchSpec.validate`, the one check the Python API uses too). Defaults come from
agentrt.defaults, shared with `generate`, `import ag2` and `agentrt.simulate`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from agentrt import __version__, defaults
from agentrt.errors import AgentrtError
from agentrt.bench.cli_spec import DEFAULT_POLICIES, DEFAULT_VLLM_POLICIES, bench_spec

app = typer.Typer(add_completion=False, no_args_is_help=False, pretty_exceptions_enable=False,
                  help="agentrt: agent-aware KV-cache policies for LLM serving.")
err = Console(stderr=True)



def out_console() -> Console:
    """Tables go to stdout, wide enough to stay readable when piped (and never cut: report.print_wide)."""
    return Console() if sys.stdout.isatty() else Console(width=160)


@app.callback(invoke_without_command=True)
def _root(ctx: typer.Context,
          version: bool = typer.Option(False, "--version", is_eager=True,
                                       help="print agentrt's version and exit")) -> None:
    if version:
        typer.echo(f"agentrt {__version__}")
        raise typer.Exit()
    if ctx.invoked_subcommand is None:
        typer.echo(ctx.get_help())
        raise typer.Exit()


def _progress(quiet: bool) -> Progress:
    return Progress(TextColumn("{task.description:>12}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=err, disable=quiet, transient=True)


def _factory(prog: Progress):
    """Progress per replay: a bar on a terminal; when stderr is not one (piped, a log file), one
    line as each replay starts and one with its time as it ends, so long runs are never silent."""
    if prog.disable or err.is_terminal:
        def factory(name: str, total: int):
            task = prog.add_task(name, total=total)
            return lambda n: prog.advance(task, n)
        return factory
    import time

    def lines(name: str, total: int):
        t0, seen = time.monotonic(), [0]
        err.print(f"{name}: replaying {total:,} calls", highlight=False)

        def advance(n: int) -> None:
            seen[0] += n
            if seen[0] >= total:
                err.print(f"{name}: done in {time.monotonic() - t0:,.0f} s", highlight=False)
        return advance
    return lines


@app.command()
def bench(
    trace: Optional[Path] = typer.Option(None, "--trace", help="replay this trace file (.jsonl or .jsonl.gz)", rich_help_panel="What to replay"),
    workload: Optional[str] = typer.Option(None, "--workload", help="replay a generated workload (see `agentrt workloads`)", rich_help_panel="What to replay"),
    policies: Optional[str] = typer.Option(None, "--policies", help=f"comma-separated policy names (default: {DEFAULT_POLICIES}; with --engine vllm: {DEFAULT_VLLM_POLICIES})", rich_help_panel="Policies"),
    gpu_blocks: Optional[int] = typer.Option(None, "--gpu-blocks", help=f"GPU KV capacity in blocks (default: what the preset's memory holds; {defaults.RUN_GPU_BLOCKS:,} for the default run)", rich_help_panel="Engine model (simulator)"),
    host_blocks: int = typer.Option(0, "--host-blocks", help="host-tier capacity in blocks (0: no host tier)", rich_help_panel="Engine model (simulator)"),
    preset: str = typer.Option(defaults.PRESET, "--preset", help="model and GPU preset (see `agentrt presets`)", rich_help_panel="Engine model (simulator)"),
    preset_file: Optional[Path] = typer.Option(None, "--preset-file", help="an engine measured by `agentrt calibrate`: its costs, KV pool (unless --gpu-blocks), scheduler limits and caching point (unless --cache-at); with --engine vllm --scheduler, the admission gate's prefill times", rich_help_panel="Engine model (simulator)"),
    seed: int = typer.Option(defaults.SEED, "--seed", help="seed of the generated workload and of the policies", rich_help_panel="What to replay"),
    workflows: int = typer.Option(defaults.WORKFLOWS, "--workflows", help="workflows to generate (with --workload or the default run; as `agentrt generate`)", rich_help_panel="What to replay"),
    concurrency: Optional[int] = typer.Option(None, "--concurrency", help=f"replay closed loop with this many workflows at once (default: the trace's; {defaults.CONCURRENCY} for a generated workload, as `agentrt generate`)", rich_help_panel="What to replay"),
    tool_scale: float = typer.Option(1.0, "--tool-scale", help="generated workloads: multiply every tool and think time by this", rich_help_panel="What to replay"),
    time_scale: float = typer.Option(1.0, "--time-scale", help="stretch trace timestamps by this factor (2: half the open-loop request rate)", rich_help_panel="What to replay"),
    json_path: Optional[Path] = typer.Option(None, "--json", help="write the results as JSON here (schema: docs/output.md)", rich_help_panel="Output"),
    csv_path: Optional[Path] = typer.Option(None, "--csv", help="write the results as CSV here, one row per policy", rich_help_panel="Output"),
    plot: Optional[Path] = typer.Option(None, "--plot", help=f"write a figure comparing the policies here (.png, .pdf, .svg, ...; the default run writes {defaults.RUN_PLOT})", rich_help_panel="Output"),
    train: Optional[Path] = typer.Option(None, "--train", help="train offline-learning policies on this trace; score on all of --trace/--workload", rich_help_panel="What to replay"),
    train_fraction: Optional[float] = typer.Option(None, "--train-fraction", help=f"hold back this share of the workflows for offline training (default {defaults.TRAIN_FRACTION} when a policy needs training, else 0); every policy is scored on the rest", rich_help_panel="What to replay"),
    predictor: Optional[Path] = typer.Option(None, "--predictor", help="PBKV: use this trained predictor (from `agentrt train`) instead of training one", rich_help_panel="Policies"),
    predictor_kind: str = typer.Option("graphsage", "--predictor-kind", help="PBKV: graphsage, markov or rgcn", rich_help_panel="Policies"),
    predictor_noise: float = typer.Option(0.0, "--predictor-noise", help="PBKV: blend predictions with random ones at this strength (0 to 1)", rich_help_panel="Policies"),
    set_: list[str] = typer.Option([], "--set", help="a component's option, one syntax for all: --set POLICY.OPTION=V (e.g. cachesage.lookahead=4), --set scheduler.OPTION=V (e.g. scheduler.max_hold_s=60), --set router.OPTION=V (repeatable; `agentrt policies|schedulers|routers --options` lists them)", rich_help_panel="Policies"),
    scheduler: str = typer.Option(defaults.SCHEDULER, "--scheduler", help="admission order of waiting calls (see `agentrt schedulers`)", rich_help_panel="Admission schedulers"),
    max_wait: Optional[float] = typer.Option(None, "--max-wait", help="scheduler starvation bound: a call waiting longer than this many seconds goes first (default 60)", rich_help_panel="Admission schedulers"),
    max_hold: Optional[float] = typer.Option(None, "--max-hold", help="schedulers that hold new workflows back (agent): the longest hold in seconds (default 600)", rich_help_panel="Admission schedulers"),
    tenant_weights: Optional[str] = typer.Option(None, "--tenant-weights", help="fair scheduler: weights as TENANT:WEIGHT,... (unnamed tenants weigh 1)", rich_help_panel="Admission schedulers"),
    shared_chunk_tokens: Optional[int] = typer.Option(None, "--shared-chunk-tokens", help="fair scheduler: while tenants share, each iteration's prefill of all but the least-served tenant is capped at this many tokens (default 512; 0: no cap)", rich_help_panel="Admission schedulers"),
    prefix_hold: bool = typer.Option(True, "--prefix-hold/--no-prefix-hold", help="agent scheduler: hold a call whose next prompt blocks another call is computing until they are cached (a fan-out's instances compute their shared prompt once)", rich_help_panel="Admission schedulers"),
    tool_hints: Optional[float] = typer.Option(None, "--tool-hints", help="act as a framework that announces how long each tool call will run: the trace's tool time times a lognormal error of this sigma (0: exact; pbkv-ta reads it; with --engine vllm sent as the agentrt.tool_call kv_hint; default: no estimates, only that a call ended in a tool call)", rich_help_panel="Policies"),
    retain_hints: Optional[float] = typer.Option(None, "--retain-hints", help="simulator: act as a framework that sends vLLM's kv.retain for a call's whole context when it ends in a tool call, for the tool time it announces (the trace's times a lognormal error of this sigma; the engine keeps retained blocks after all others within --retain-budget; beside or instead of --tool-hints)", rich_help_panel="Policies"),
    retain_budget: float = typer.Option(0.25, "--retain-budget", help="simulator, with --retain-hints: the most of the GPU blocks retained at once (a fraction, as the connector's retain_budget)", rich_help_panel="Policies"),
    safety_net: bool = typer.Option(True, "--safety-net/--no-safety-net", help="simulator: the runtime's LRU safety net (a policy that measurably loses to LRU on the same calls is ranked by LRU until it does not; docs/runtime.md)", rich_help_panel="Policies"),
    cache_at: Optional[str] = typer.Option(None, "--cache-at", help="simulator: when a computed prompt block becomes a hit for other calls: prefill (after the prefill that computes it, as SGLang; the default) or schedule (as soon as it is scheduled, as vLLM V1)", rich_help_panel="Engine model (simulator)"),
    replicas: int = typer.Option(1, "--replicas", help="simulate this many replicas (each with --gpu-blocks) behind --router", rich_help_panel="Several replicas"),
    router: Optional[str] = typer.Option(None, "--router", help="with --replicas N: how calls are spread (see `agentrt routers`; default agent)", rich_help_panel="Several replicas"),
    router_set: list[str] = typer.Option([], "--router-set", help="with --replicas N: router option, e.g. --router-set one_call_prefix=false (repeatable; see docs/routers.md)", rich_help_panel="Several replicas"),
    transfer_gbps: Optional[float] = typer.Option(None, "--transfer-gbps", help="with --replicas N: replicas copy cached prefixes from each other's GPUs over a link of this many GB/s (default: they do not)", rich_help_panel="Several replicas"),
    quiet: bool = typer.Option(False, "--quiet", help="no progress bar", rich_help_panel="Output"),
    engine: str = typer.Option("sim", "--engine", help="sim: the simulator; vllm: a live vLLM server per policy (needs the vllm extra)", rich_help_panel="Live vLLM (--engine vllm)"),
    model_size: str = typer.Option("tiny", "--model-size", help="[vllm] local random-weight model: tiny or small", rich_help_panel="Live vLLM (--engine vllm)"),
    vllm_blocks: int = typer.Option(256, "--vllm-blocks", help="[vllm] KV pool in engine blocks of 32 tokens", rich_help_panel="Live vLLM (--engine vllm)"),
    scale: float = typer.Option(0.25, "--scale", help="[vllm] scale token lengths (prompts and outputs) by this", rich_help_panel="Live vLLM (--engine vllm)"),
    think_scale: float = typer.Option(1.0, "--think-scale", help="[vllm] scale think times by this (shorter live runs)", rich_help_panel="Live vLLM (--engine vllm)"),
    max_calls: Optional[int] = typer.Option(None, "--max-calls", help="[vllm] replay whole workflows up to this many calls", rich_help_panel="Live vLLM (--engine vllm)"),
    log_dir: Optional[Path] = typer.Option(None, "--log-dir", help="[vllm] keep server and connector logs here", rich_help_panel="Live vLLM (--engine vllm)"),
    tenant_shares: bool = typer.Option(True, "--tenant-shares/--no-tenant-shares", help="[vllm] with --scheduler fair, the connector shares the KV pool by tenant (off: the gate's order only)", rich_help_panel="Live vLLM (--engine vllm)"),
    live_outputs: bool = typer.Option(True, "--live-outputs/--no-live-outputs", help="[vllm] a later prompt that carries an earlier answer (the trace's output_hash_ids) sends the tokens the engine generated, as an agent does (off: generated stand-ins, never a hit)", rich_help_panel="Live vLLM (--engine vllm)"),
    engine_iterations: bool = typer.Option(False, "--engine-iterations", help="[vllm] vLLM logs every iteration (--enable-logging-iteration-details) and each result gets engine_iterations: the engine's compute time against the makespan, decode steps by batch size (a diagnostic: the logging costs the API server a little)", rich_help_panel="Live vLLM (--engine vllm)"),
    vllm_integration: str = typer.Option("connector", "--vllm-integration", help="[vllm] how agentrt enters vLLM: connector (its KV connector, --kv-transfer-config; needed for --host-blocks) or scheduler (vLLM's --scheduler-cls: no KV connector configured, so vLLM runs its stock paths; agentrt's metrics not on vLLM's /metrics)", rich_help_panel="Live vLLM (--engine vllm)"),
    vllm_baseline: str = typer.Option("lru", "--vllm-baseline", help="[vllm] the run before the policies': lru (agentrt with lru: vLLM's own order through the same hooks), stock (vLLM with no agentrt at all: what a user compares against) or none", rich_help_panel="Live vLLM (--engine vllm)"),
    vllm_own_priority: bool = typer.Option(False, "--vllm-own-priority", help="[vllm] leave vLLM's engine core at its own CPU priority (default: nice 19, so that on a small CPU host its busy loop does not starve the client that measures it)", rich_help_panel="Live vLLM (--engine vllm)"),
) -> None:
    """Replay a trace under several policies and print hit rates, TTFT percentiles, end-to-end latency and throughput."""
    from agentrt.bench.report import print_result
    if engine != "vllm":
        live = [f for f, given in (("--model-size", model_size != "tiny"), ("--vllm-blocks", vllm_blocks != 256),
                                   ("--scale", scale != 0.25), ("--think-scale", think_scale != 1.0),
                                   ("--max-calls", max_calls is not None), ("--log-dir", log_dir is not None),
                                   ("--no-tenant-shares", not tenant_shares),
                                   ("--no-live-outputs", not live_outputs),
                                   ("--engine-iterations", engine_iterations),
                                   ("--vllm-own-priority", vllm_own_priority),
                                   ("--vllm-integration", vllm_integration != "connector"),
                                   ("--vllm-baseline", vllm_baseline != "lru")) if given]
        if live:
            raise AgentrtError(f"{', '.join(live)}: for --engine vllm only (the simulator would ignore them)")
    spec = bench_spec(trace=trace, workload=workload, policies=policies, engine=engine,
                      gpu_blocks=gpu_blocks, host_blocks=host_blocks, preset=preset,
                      preset_file=preset_file, seed=seed,
                      workflows=workflows, concurrency=concurrency, tool_scale=tool_scale,
                      time_scale=time_scale, json_path=json_path, csv_path=csv_path, plot=plot,
                      train=train, train_fraction=train_fraction, predictor=predictor,
                      predictor_kind=predictor_kind, predictor_noise=predictor_noise, set_=set_,
                      scheduler=scheduler, max_wait=max_wait, max_hold=max_hold,
                      tenant_weights=tenant_weights, replicas=replicas, router=router, router_set=router_set,
                      shared_chunk_tokens=shared_chunk_tokens, tool_hints=tool_hints,
                      transfer_gbps=transfer_gbps, prefix_hold=prefix_hold, cache_at=cache_at,
                      retain_hints=retain_hints, retain_budget=retain_budget,
                      safety_net=safety_net)
    if engine == "vllm":
        doc = _bench_vllm(spec, quiet, model_size, vllm_blocks, scale, think_scale, max_calls, log_dir,
                          tenant_shares, live_outputs, engine_iterations, vllm_own_priority, vllm_integration,
                          vllm_baseline)
    else:
        with _progress(quiet) as prog:
            doc = spec.run(progress=_factory(prog))
    print_result(doc, out_console())
    spec.write(doc, say=err.print)


def _bench_vllm(spec, quiet: bool, model_size: str, vllm_blocks: int, scale: float,
                think_scale: float, max_calls: int | None, log_dir: Path | None,
                tenant_shares: bool = True, live_outputs: bool = True, engine_iterations: bool = False,
                vllm_own_priority: bool = False, vllm_integration: str = "connector",
                vllm_baseline: str = "lru") -> dict:
    """`bench --engine vllm`: see agentrt.enginebench.runner. With a scheduler other than fcfs,
    stock vLLM (lru, fcfs) runs first and every policy then runs under the scheduler, through
    `agentrt serve --scheduler` in front of vLLM (its admission gate)."""
    import importlib.util
    if importlib.util.find_spec("vllm") is None:
        raise AgentrtError('--engine vllm needs vLLM: pip install -e ".[vllm]"')
    if model_size not in ("tiny", "small"):
        raise AgentrtError(f"--model-size must be tiny or small, got {model_size!r}")
    from agentrt.checks import positive
    for name, value in (("vllm_blocks", vllm_blocks), ("scale", scale), ("think_scale", think_scale),
                        ("max_calls", max_calls)):
        positive(value, name, cli=True)
    from agentrt.enginebench.runner import EngineBenchOptions, run_engine_bench
    from agentrt.local.engine_nice import ENGINE_CORE_NICE
    o = spec.options
    opts = EngineBenchOptions(model_size=model_size, vllm_blocks=vllm_blocks, host_blocks=o.host_blocks,
                              scale=scale, time_scale=o.time_scale, think_scale=think_scale,
                              max_calls=max_calls, concurrency=o.concurrency, seed=o.seed,
                              train_fraction=o.train_fraction, train_path=o.train_path,
                              policy_options=o.policy_options,
                              log_dir=str(log_dir) if log_dir else None,
                              scheduler=o.scheduler, scheduler_options=dict(o.scheduler_options),
                              tool_hints=o.tool_hints, tenant_shares=tenant_shares,
                              live_outputs=live_outputs, preset_file=o.preset_file,
                              engine_iterations=engine_iterations,
                              engine_core_nice=None if vllm_own_priority else ENGINE_CORE_NICE,
                              integration=vllm_integration, baseline=vllm_baseline)
    source, owned = spec.open_source()
    try:
        with _progress(quiet) as prog:
            return run_engine_bench(source, spec.policies, opts, progress=_factory(prog), log=err.print)
    finally:
        if owned:
            source.close()


@app.command()
def policies(options: bool = typer.Option(False, "--options", help="also list each policy's options (--set POLICY.OPTION=V) with defaults")) -> None:
    """List the policies every tool accepts by name."""
    from agentrt.policies.registry import BOUNDS, POLICIES, describe
    for line in POLICIES.listing(options, {b: describe(b) for b in BOUNDS}):
        typer.echo(line)


@app.command()
def schedulers(options: bool = typer.Option(False, "--options", help="also list each scheduler's options (--set scheduler.OPTION=V) with defaults")) -> None:
    """List the admission schedulers `bench --scheduler` accepts by name."""
    from agentrt.sched.registry import SCHEDULERS
    for line in SCHEDULERS.listing(options):
        typer.echo(line)


@app.command()
def presets(file: Optional[Path] = typer.Option(None, "--file", help="show what a preset file (from `agentrt calibrate`) contains")) -> None:
    """List the model and GPU presets of the engine simulator, or what a preset file holds."""
    from rich.table import Table

    from agentrt.bench.report import print_wide
    if file is not None:
        from agentrt.engine.preset_file import describe, load_preset_file
        for what, value in describe(load_preset_file(file)):
            typer.echo(f"{what:18s} {value}")
        return
    from agentrt.engine.costs import CostModel
    from agentrt.engine.presets import PRESETS
    t = Table(title="engine presets (times from the cost model)")
    for col in ("preset", "model", "GPU", "KV tokens", "KiB/token", "prefill 8k s",
                "512 after 8k cached s", "decode 32x4k ms", "PCIe 8k tok s"):
        t.add_column(col, justify="left" if col in ("preset", "model", "GPU") else "right")
    for p in PRESETS.values():
        c = CostModel(p)
        t.add_row(p.name, p.model.name, p.gpu.name, f"{p.kv_capacity_tokens():,}",
                  f"{p.model.kv_bytes_per_token // 1024}", f"{c.prefill(8192, 0):.3f}",
                  f"{c.prefill(512, 8192):.4f}", f"{1000 * c.decode(32, 32 * 4096):.1f}",
                  f"{c.pcie_seconds(8192 * p.model.kv_bytes_per_token):.3f}")
    print_wide(out_console(), t)


# --- commands defined in other modules -------------------------------------------------------
def _register_extra_commands() -> None:
    import importlib
    for mod in ("agentrt.commands.workloads", "agentrt.commands.predict", "agentrt.serve.cli", "agentrt.commands.routers",
                "agentrt.enginebench.cli"):
        try:
            m = importlib.import_module(mod)
        except ModuleNotFoundError as e:
            if e.name != mod:
                raise
            continue
        m.register_commands(app)


_register_extra_commands()


def _plain_warnings() -> None:
    """Bench and trace warnings print as one `warning: ...` line, not Python's file:line form."""
    import warnings

    from agentrt.bench.source import BenchWarning
    from agentrt.errors import SetupWarning, TraceWarning
    show = warnings.showwarning

    def _show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, (BenchWarning, TraceWarning, SetupWarning)):
            print(f"warning: {message}", file=sys.stderr)
        else:
            show(message, category, filename, lineno, file, line)
    warnings.showwarning = _show


def _usage_line(e: Exception) -> str:
    """A click/typer usage error as one line: its message and where the help is."""
    ctx = getattr(e, "ctx", None)
    where = ctx.command_path if ctx is not None else "agentrt"
    return f"{e.format_message()} (see '{where} --help')"


def _click_errors() -> tuple[type, ...]:
    """ClickException, as typer raises it: its vendored copy (typer >= 0.23) and click's own."""
    types = [c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException"]
    try:
        import click
        types.append(click.ClickException)
    except ImportError:
        pass
    return tuple(types)


def main() -> None:
    _plain_warnings()
    try:
        rc = app(prog_name="agentrt", standalone_mode=False)
    except AgentrtError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(130)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except typer.Abort:
        sys.exit(1)
    except _click_errors() as e:   # parser errors: unknown command, bad value, missing argument
        print(f"error: {_usage_line(e)}", file=sys.stderr)
        sys.exit(2)
    sys.exit(rc if isinstance(rc, int) else 0)


if __name__ == "__main__":
    main()

"""The `agentrt` command line. User errors print one line and exit non-zero, with no traceback."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from agentrt.errors import AgentrtError
from agentrt.options import parse_value

app = typer.Typer(add_completion=False, no_args_is_help=False, pretty_exceptions_enable=False,
                  help="agentrt: agent-aware KV-cache policies for LLM serving.")
err = Console(stderr=True)


def out_console() -> Console:
    """Tables go to stdout, wide enough to stay readable when piped."""
    return Console() if sys.stdout.isatty() else Console(width=160)

# `agentrt bench` with no arguments: a regime where eviction decides (docs/results.md, "Default run"):
# the mix workload, 16 workflows at once (the replica is not saturated), a quarter of the Llama-3.1-8B
# H100 KV pool; every policy family beside the in-simulator oracle and the offline bounds.
DEFAULT_POLICIES = "lru,cachesage,kvflow,pbkv-lae,pbkv,pbkv-ta,oracle,belady,infinite"
DEFAULT_VLLM_POLICIES = "lru"
DEFAULT_WORKLOAD = "mix"
DEFAULT_CONCURRENCY = 16
DEFAULT_GPU_BLOCKS = 6430
DEFAULT_PLOT = "agentrt-bench.png"
PBKV_PREDICTING = ("pbkv-he", "pbkv", "pbkv-aggressive", "pbkv-ta")


def _split(s: str) -> list[str]:
    return [p.strip() for p in s.split(",") if p.strip()]


def parse_policy_options(items: list[str], policies: list[str]) -> dict:
    """`--set policy.option=value` items -> {policy: {option: value}}."""
    out: dict = {}
    for item in items:
        key, eq, val = item.partition("=")
        pol, dot, opt = key.partition(".")
        if not eq or not dot or not pol or not opt:
            raise AgentrtError(f"--set {item!r}: expected POLICY.OPTION=VALUE")
        if pol not in policies:
            raise AgentrtError(f"--set {item!r}: policy '{pol}' is not in --policies")
        out.setdefault(pol, {})[opt] = parse_value(val)
    return out


def scheduler_options(name: str, max_wait: float | None, tenant_weights: str | None,
                      max_hold: float | None = None) -> dict:
    """Check `--scheduler` and its options before any replay; the scheduler's keyword options."""
    from agentrt.sched.registry import make_scheduler
    opts: dict = {}
    if max_wait is not None:
        if not max_wait > 0:
            raise AgentrtError(f"--max-wait must be > 0 seconds, got {max_wait}")
        opts["max_wait_s"] = max_wait
    if max_hold is not None:
        if not max_hold > 0:
            raise AgentrtError(f"--max-hold must be > 0 seconds, got {max_hold}")
        opts["max_hold_s"] = max_hold
    if tenant_weights is not None:
        if name != "fair":
            raise AgentrtError("--tenant-weights applies to --scheduler fair only")
        opts["weights"] = tenant_weights
    make_scheduler(name, **opts)
    return opts


@app.command()
def bench(
    trace: Optional[Path] = typer.Option(None, "--trace", help="replay this trace file (.jsonl or .jsonl.gz)"),
    workload: Optional[str] = typer.Option(None, "--workload", help="replay a generated workload (see `agentrt workloads`)"),
    policies: Optional[str] = typer.Option(None, "--policies", help=f"comma-separated policy names (default: {DEFAULT_POLICIES}; with --engine vllm: {DEFAULT_VLLM_POLICIES})"),
    gpu_blocks: Optional[int] = typer.Option(None, "--gpu-blocks", help=f"GPU KV capacity in blocks (default: what the preset's memory holds; {DEFAULT_GPU_BLOCKS:,} for the default workload)"),
    host_blocks: int = typer.Option(0, "--host-blocks", help="host-tier capacity in blocks (0: no host tier)"),
    preset: str = typer.Option("llama3.1-8b-h100", "--preset", help="model and GPU preset"),
    seed: int = typer.Option(0, "--seed", help="seed of the generated workload and of the policies"),
    workflows: int = typer.Option(200, "--workflows", help="workflows to generate (with --workload or the default)"),
    concurrency: Optional[int] = typer.Option(None, "--concurrency", help=f"replay closed loop with this many workflows at once (generated workloads: {DEFAULT_CONCURRENCY})"),
    tool_scale: float = typer.Option(1.0, "--tool-scale", help="generated workloads: multiply every tool and think time by this"),
    time_scale: float = typer.Option(1.0, "--time-scale", help="stretch trace timestamps by this factor (2: half the open-loop request rate)"),
    json_path: Optional[Path] = typer.Option(None, "--json", help="write the results as JSON here"),
    plot: Optional[Path] = typer.Option(None, "--plot", help=f"write a PNG comparing the policies here (the default run writes {DEFAULT_PLOT})"),
    train: Optional[Path] = typer.Option(None, "--train", help="train offline-learning policies on this trace; score on all of --trace/--workload"),
    train_fraction: Optional[float] = typer.Option(None, "--train-fraction", help="hold back this share of the workflows for offline training (default 0.25 when a policy needs training, else 0); every policy is scored on the rest"),
    predictor: Optional[Path] = typer.Option(None, "--predictor", help="PBKV: use this trained predictor (from `agentrt train`) instead of training one"),
    predictor_kind: str = typer.Option("graphsage", "--predictor-kind", help="PBKV: graphsage, markov or rgcn"),
    predictor_noise: float = typer.Option(0.0, "--predictor-noise", help="PBKV: blend predictions with random ones at this strength (0 to 1)"),
    set_: list[str] = typer.Option([], "--set", help="policy option, e.g. --set cachesage.lookahead=4 (repeatable)"),
    scheduler: str = typer.Option("fcfs", "--scheduler", help="admission order of waiting calls (see `agentrt schedulers`)"),
    max_wait: Optional[float] = typer.Option(None, "--max-wait", help="scheduler starvation bound: a call waiting longer than this many seconds goes first (default 60)"),
    max_hold: Optional[float] = typer.Option(None, "--max-hold", help="schedulers that hold new workflows back (agent): the longest hold in seconds (default 600)"),
    tenant_weights: Optional[str] = typer.Option(None, "--tenant-weights", help="fair scheduler: weights as TENANT:WEIGHT,... (unnamed tenants weigh 1)"),
    quiet: bool = typer.Option(False, "--quiet", help="no progress bar"),
    engine: str = typer.Option("sim", "--engine", help="sim: the simulator; vllm: a live vLLM server per policy (needs the vllm extra)"),
    model_size: str = typer.Option("tiny", "--model-size", help="[vllm] local random-weight model: tiny or small"),
    vllm_blocks: int = typer.Option(256, "--vllm-blocks", help="[vllm] KV pool in engine blocks of 32 tokens"),
    scale: float = typer.Option(0.25, "--scale", help="[vllm] scale token lengths (prompts and outputs) by this"),
    think_scale: float = typer.Option(1.0, "--think-scale", help="[vllm] scale think times by this (shorter live runs)"),
    max_calls: Optional[int] = typer.Option(None, "--max-calls", help="[vllm] replay whole workflows up to this many calls"),
    log_dir: Optional[Path] = typer.Option(None, "--log-dir", help="[vllm] keep server and connector logs here"),
) -> None:
    """Replay a trace under several policies and print hit rates, TTFT, end-to-end latency and throughput."""
    from agentrt.bench.report import plot_result, print_result
    from agentrt.bench.runner import BenchOptions, run_bench
    from agentrt.bench.source import file_source, workload_source
    from agentrt.engine.presets import get_preset
    from agentrt.policies.registry import check_names
    from agentrt.workloads.base import GenConfig

    default_run = trace is None and workload is None
    if policies is None:
        policies = DEFAULT_VLLM_POLICIES if engine == "vllm" else DEFAULT_POLICIES
    if default_run and engine == "sim":
        if gpu_blocks is None:
            gpu_blocks = DEFAULT_GPU_BLOCKS
        if plot is None and json_path is None:
            plot = Path(DEFAULT_PLOT)
    names = _split(policies)
    if not names:
        raise AgentrtError("--policies is empty")
    check_names(names)
    get_preset(preset)
    if trace is not None and workload is not None:
        raise AgentrtError("give either --trace or --workload, not both")
    if gpu_blocks is not None and gpu_blocks <= 0:
        raise AgentrtError(f"--gpu-blocks must be > 0, got {gpu_blocks}")
    if host_blocks < 0:
        raise AgentrtError(f"--host-blocks must be >= 0, got {host_blocks}")
    if time_scale <= 0:
        raise AgentrtError(f"--time-scale must be > 0, got {time_scale}")
    if trace is not None:
        source = file_source(trace)
    else:
        if tool_scale <= 0:
            raise AgentrtError(f"--tool-scale must be > 0, got {tool_scale}")
        source = workload_source(workload or DEFAULT_WORKLOAD, GenConfig(
            workflows=workflows, seed=seed, concurrency=concurrency or DEFAULT_CONCURRENCY,
            tool_scale=tool_scale))
    if train is not None:
        from agentrt.trace.reader import TraceReader
        TraceReader(train)  # a missing or malformed header fails here, before any replay
    if engine not in ("sim", "vllm"):
        raise AgentrtError(f"--engine must be sim or vllm, got {engine!r}")
    if engine == "vllm":
        try:
            _bench_vllm(source, names, train, train_fraction, set_, quiet, json_path, plot, model_size,
                        vllm_blocks, host_blocks, scale, time_scale, think_scale, max_calls,
                        concurrency, seed, log_dir, scheduler,
                        scheduler_options(scheduler, max_wait, tenant_weights, max_hold))
        finally:
            source.close()
        return
    if not 0.0 <= predictor_noise <= 1.0:
        raise AgentrtError(f"--predictor-noise must be in [0, 1], got {predictor_noise}")
    if predictor is not None and not predictor.is_file():
        raise AgentrtError(f"--predictor {predictor}: no such file")
    popts = parse_policy_options(set_, names)
    sopts = scheduler_options(scheduler, max_wait, tenant_weights, max_hold)
    for name in names:
        if name in PBKV_PREDICTING:
            o = popts.setdefault(name, {})
            o.setdefault("predictor_kind", predictor_kind)
            o.setdefault("predictor_noise", predictor_noise)
            if predictor is not None:
                o.setdefault("predictor", str(predictor))
    opts = BenchOptions(preset=preset, gpu_blocks=gpu_blocks, host_blocks=host_blocks,
                        concurrency=concurrency, seed=seed, train_fraction=train_fraction,
                        time_scale=time_scale,
                        train_path=str(train) if train else None,
                        policy_options=popts, scheduler=scheduler, scheduler_options=sopts)
    try:
        with Progress(TextColumn("{task.description:>12}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=err, disable=quiet, transient=True) as prog:
            def factory(name: str, total: int):
                task = prog.add_task(name, total=total)
                return lambda n: prog.advance(task, n)
            doc = run_bench(source, names, opts, progress=factory)
    finally:
        source.close()
    print_result(doc, out_console())
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(doc, indent=2))
    if plot is not None:
        plot_result(doc, plot)
        err.print(f"plot written to {plot}")


def _bench_vllm(source, names, train, train_fraction, set_, quiet, json_path, plot, model_size,
                vllm_blocks, host_blocks, scale, time_scale, think_scale, max_calls, concurrency, seed,
                log_dir, scheduler: str = "fcfs", sched_options: dict | None = None) -> None:
    """`bench --engine vllm`: see agentrt.enginebench.runner. With a scheduler other than fcfs,
    stock vLLM (lru, fcfs) runs first and every policy then runs under the scheduler, its
    priorities carried by vLLM's `--scheduling-policy priority`."""
    import importlib.util
    if importlib.util.find_spec("vllm") is None:
        raise AgentrtError('--engine vllm needs vLLM: pip install -e ".[vllm]"')
    if model_size not in ("tiny", "small"):
        raise AgentrtError(f"--model-size must be tiny or small, got {model_size!r}")
    from agentrt.bench.report import plot_result, print_result
    from agentrt.enginebench.runner import EngineBenchOptions, run_engine_bench, write_json
    opts = EngineBenchOptions(model_size=model_size, vllm_blocks=vllm_blocks, host_blocks=host_blocks,
                              scale=scale, time_scale=time_scale, think_scale=think_scale,
                              max_calls=max_calls,
                              concurrency=concurrency, seed=seed, train_fraction=train_fraction,
                              train_path=str(train) if train else None,
                              policy_options=parse_policy_options(set_, names),
                              log_dir=str(log_dir) if log_dir else None,
                              scheduler=scheduler, scheduler_options=dict(sched_options or {}))
    with Progress(TextColumn("{task.description:>12}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=err, disable=quiet, transient=True) as prog:
        def factory(name: str, total: int):
            task = prog.add_task(name, total=total)
            return lambda n: prog.advance(task, n)
        doc = run_engine_bench(source, names, opts, progress=factory, log=err.print)
    print_result(doc, out_console())
    if json_path is not None:
        write_json(doc, json_path)
    if plot is not None:
        plot_result(doc, plot)


@app.command()
def policies() -> None:
    """List the policies every tool accepts by name."""
    from agentrt.policies.registry import describe, policy_names
    for n in policy_names():
        typer.echo(f"{n:18s} {describe(n)}")


@app.command()
def schedulers() -> None:
    """List the admission schedulers `bench --scheduler` accepts by name."""
    from agentrt.sched.registry import describe_scheduler, scheduler_names
    for n in scheduler_names():
        typer.echo(f"{n:18s} {describe_scheduler(n)}")


@app.command()
def presets() -> None:
    """List the model and GPU presets of the engine simulator."""
    from rich.table import Table

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
    out_console().print(t)


# --- commands defined in other modules -------------------------------------------------------
def _register_extra_commands() -> None:
    import importlib
    for mod in ("agentrt.workloads.cli", "agentrt.predict.cli", "agentrt.serve.cli"):
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
    from agentrt.errors import TraceWarning
    show = warnings.showwarning

    def _show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, (BenchWarning, TraceWarning)):
            print(f"warning: {message}", file=sys.stderr)
        else:
            show(message, category, filename, lineno, file, line)
    warnings.showwarning = _show


def main() -> None:
    _plain_warnings()
    try:
        app(standalone_mode=False)
    except AgentrtError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(130)
    except Exception as e:  # click usage errors arrive here in non-standalone mode
        import click
        if isinstance(e, click.exceptions.Exit):
            sys.exit(e.exit_code)
        if isinstance(e, click.ClickException):
            e.show()
            sys.exit(e.exit_code)
        if isinstance(e, click.exceptions.Abort):
            sys.exit(1)
        raise


if __name__ == "__main__":
    main()

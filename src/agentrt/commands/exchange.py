"""Trace exchange commands of the `agentrt` CLI: `import dynamo`, `import tracelab`, `export mooncake`.

`commands.workloads` registers them (the imports beside `import ag2`). Every value and path is checked
before anything is read; a bad input line stops the import with file, line and field
(`TraceError`), and `-o` is written only when complete. The defaults (block size, concurrency,
seed, the replay's preset) are agentrt.defaults, as `generate`, `import ag2` and `bench` use.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from agentrt import defaults
from agentrt.errors import AgentrtError
from agentrt.checks import input_file, output_file, positive
from agentrt.commands.workloads import _arrivals, _block_size, _trace_name


def _import_paths(src: Path, out: Path, what: str) -> None:
    input_file(src, f"import {what}")
    _trace_name(out)
    output_file(out, "-o")


def import_dynamo_cmd(
    src: Path = typer.Argument(..., help="agentic Mooncake file (JSON Lines; .gz read too)"),
    out: Path = typer.Option(..., "-o", "--out", help="trace file to write (.jsonl or .jsonl.gz)"),
    block_size: int = typer.Option(..., "--block-size", help="tokens per hash id: the 'Trace block size' request_trace_to_mooncake printed (the file does not say)"),
    concurrency: Optional[int] = typer.Option(None, "--concurrency", help="replay closed loop with this many workflows at once (default: open loop at the recorded starts, as DynoSim)"),
) -> None:
    """Import an NVIDIA Dynamo agentic replay trace (sessions, wait_for, delays, tool waits, hash ids)."""
    from agentrt.workloads.dynamo import import_dynamo
    _import_paths(src, out, "dynamo")
    _block_size(block_size)
    _arrivals(None, concurrency)
    s = import_dynamo(src, out, block_size, concurrency)
    typer.echo(f"wrote {s.calls} calls of {s.workflows} workflows from {s.sessions} sessions "
               f"({s.joined} with subagent sessions joined in) to {out}")


def import_tracelab_cmd(
    src: Path = typer.Argument(..., help="TraceLab round trace (round_trace.jsonl; .gz read too)"),
    out: Path = typer.Option(..., "-o", "--out", help="trace file to write (.jsonl or .jsonl.gz)"),
    rate: Optional[float] = typer.Option(None, "--rate", help="Poisson arrivals, sessions per second"),
    concurrency: Optional[int] = typer.Option(None, "--concurrency", help=f"closed loop: sessions at once (default {defaults.CONCURRENCY})"),
    seed: int = typer.Option(defaults.SEED, "--seed", help="seed of the Poisson arrivals"),
    block_size: int = typer.Option(defaults.BLOCK_SIZE, "--block-size", help="tokens per hash id"),
) -> None:
    """Import TraceLab coding-agent sessions: one workflow per session, prefix reuse from prefix_tokens."""
    from agentrt.workloads.tracelab import TraceLabImporter, import_tracelab
    _import_paths(src, out, "tracelab")
    _arrivals(rate, concurrency)
    _block_size(block_size)
    if seed < 0:
        raise AgentrtError(f"--seed must be >= 0, got {seed}")
    if rate is None and concurrency is None:
        concurrency = defaults.CONCURRENCY
    imp = TraceLabImporter(block_size=block_size, rate=rate, concurrency=concurrency, seed=seed)
    s = import_tracelab(src, out, imp)
    typer.echo(f"wrote {s.calls} calls of {s.workflows} sessions to {out} ({s.tool_waits} after "
               f"tools, {s.human_waits} after a user message"
               + (f", {s.untimed} user messages without timestamps: no wait" if s.untimed else "") + ")")


def export_mooncake_cmd(
    trace: Optional[Path] = typer.Argument(None, help="workflow trace to export (or give --workload)"),
    out: Path = typer.Option(..., "-o", "--out", help="Mooncake file to write (.jsonl, plain text: vLLM's loader reads no gzip)"),
    workload: Optional[str] = typer.Option(None, "--workload", help="export a generated workload instead of TRACE (see `agentrt workloads`)"),
    workflows: int = typer.Option(defaults.WORKFLOWS, "--workflows", help="with --workload: workflows to generate"),
    seed: int = typer.Option(defaults.SEED, "--seed", help="seed of the generated workload"),
    tool_scale: float = typer.Option(1.0, "--tool-scale", help="with --workload: multiply every tool and think time by this"),
    preset: str = typer.Option(defaults.PRESET, "--preset", help="replay: model and GPU preset (see `agentrt presets`)"),
    gpu_blocks: Optional[int] = typer.Option(None, "--gpu-blocks", help="replay: GPU KV capacity in blocks (default: what the preset's memory holds)"),
    concurrency: Optional[int] = typer.Option(None, "--concurrency", help=f"replay closed loop with this many workflows at once (default: the trace's; {defaults.CONCURRENCY} for a workload)"),
    time_scale: float = typer.Option(1.0, "--time-scale", help="replay: stretch trace timestamps by this factor"),
) -> None:
    """Write Mooncake lines that `vllm bench serve --dataset-name timed_trace` replays: arrival
    times from one simulated replay (LRU), block size and client flags in OUT.meta.json."""
    from agentrt.bench.mooncake import export_mooncake, meta_path
    from agentrt.bench.runner import BenchOptions
    from agentrt.bench.spec import BenchSpec
    if (trace is None) == (workload is None):
        raise AgentrtError("give a trace file or --workload NAME (one of them)")
    if trace is not None and (workflows != defaults.WORKFLOWS or tool_scale != 1.0):
        raise AgentrtError("--workflows and --tool-scale shape a generated workload (--workload); "
                           "with a trace file they would be ignored")
    if out.name.lower().endswith((".gz", ".bz2", ".xz", ".zst", ".lz4", ".zip")):
        raise AgentrtError(f"-o {out}: vLLM's timed-trace loader reads plain JSON Lines, not {out.suffix}")
    output_file(out, "-o")
    positive(time_scale, "time_scale", cli=True)
    spec = BenchSpec(policies=["lru"], trace=trace, workload=workload, workflows=workflows,
                     tool_scale=tool_scale,
                     options=BenchOptions(preset=preset, gpu_blocks=gpu_blocks, concurrency=concurrency,
                                          time_scale=time_scale, seed=seed))
    if trace is not None:
        input_file(trace, "export mooncake")
    spec.validate()
    source, owned = spec.open_source()
    try:
        e = export_mooncake(source, spec.options, out)
    finally:
        if owned:
            source.close()
    r = e.replay
    typer.echo(f"wrote {e.requests:,} requests over {e.duration_s:,.1f} s (block size {e.block_size}; "
               f"arrivals from one {r['policy']} replay on {r['preset']}, {r['gpu_blocks']:,} GPU blocks, "
               + (f"{r['concurrency']} workflows at once" if r["concurrency"] else "open loop")
               + f") to {out}; metadata in {meta_path(out)}")
    typer.echo("replay with: vllm bench serve --model MODEL " + " ".join(e.client_flags()))


def register(imp: typer.Typer, app: typer.Typer) -> None:
    imp.command("dynamo")(import_dynamo_cmd)
    imp.command("tracelab")(import_tracelab_cmd)
    exp = typer.Typer(help="Export traces for other tools.", no_args_is_help=True)
    exp.command("mooncake")(export_mooncake_cmd)
    app.add_typer(exp, name="export")

"""Workload commands of the `agentrt` CLI: workloads, tools, generate, stats, import ag2 (and,
from `commands.exchange`, import dynamo, import tracelab, export mooncake).

`agentrt.cli` loads this module and calls `register_commands(app)`. User errors raise
`AgentrtError`, which the main CLI prints in one line before exiting with status 2; every value
and path is checked before anything is generated or read. The defaults (workflows, concurrency,
block size, seed) are agentrt.defaults, the ones `agentrt bench --workload` generates with.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

from agentrt import defaults
from agentrt.errors import AgentrtError
from agentrt.checks import input_file, output_file, positive
from agentrt.trace.limits import MAX_CONCURRENCY, MAX_TOKENS


def _arrivals(rate: Optional[float], concurrency: Optional[int]) -> None:
    if rate is not None and concurrency is not None:
        raise AgentrtError("give either --rate or --concurrency, not both")
    positive(rate, "rate", cli=True)
    positive(concurrency, "concurrency", cli=True)
    if concurrency is not None and concurrency > MAX_CONCURRENCY:
        raise AgentrtError(f"--concurrency must be at most {MAX_CONCURRENCY:,} (what a trace header "
                           f"holds), got {concurrency}")


def _trace_name(out: Path) -> None:
    """Traces are written plain or gzip-compressed (by the name): refuse a name that promises
    another compression rather than write plain text under it."""
    name = out.name.lower()
    if name.endswith((".bz2", ".xz", ".zst", ".lz4", ".zip")):
        raise AgentrtError(f"-o {out}: traces are written as .jsonl or .jsonl.gz, not {out.suffix}")


def _block_size(block_size: int) -> None:
    if not 0 < block_size <= MAX_TOKENS:
        raise AgentrtError(f"--block-size must be in 1..{MAX_TOKENS:,} (what a trace holds), got {block_size}")


def _generator_options(items: list[str]) -> dict:
    """`--set OPTION=VALUE` items of `generate` -> the generator's keyword options."""
    from agentrt.checks import parse_value
    out: dict = {}
    for item in items:
        key, eq, val = item.partition("=")
        if not eq or not key:
            raise AgentrtError(f"--set {item!r}: expected OPTION=VALUE (an option of the workload)")
        out[key] = parse_value(val)
    return out


def workloads() -> None:
    """List the workload generators, one line each."""
    from agentrt.workloads.registry import workload_summaries
    for name, summary in workload_summaries().items():
        typer.echo(f"{name:13s} {summary}")


def tools() -> None:
    """List the tool-latency distributions the generators draw think times from, one line each."""
    from agentrt.workloads.tools import TOOLS, quantiles
    typer.echo(f"{'tool':10s} {'p10 s':>7s} {'p50 s':>7s} {'p90 s':>7s} {'p99 s':>7s} {'clip s':>13s}  source")
    for name, t in TOOLS.items():
        q = quantiles(name, (0.1, 0.5, 0.9, 0.99))
        clip = f"{t.lo_ms / 1000:g}-{t.hi_ms / 1000:g}"
        typer.echo(f"{name:10s} " + " ".join(f"{x / 1000:7.2f}" for x in q) + f" {clip:>13s}  {t.source}")


def generate(
    name: str = typer.Argument(..., help="workload name (see `agentrt workloads`)"),
    out: Path = typer.Option(..., "-o", "--out", help="trace file to write (.jsonl or .jsonl.gz)"),
    workflows: int = typer.Option(defaults.WORKFLOWS, "--workflows", help="number of workflows (as `agentrt bench --workload`)"),
    rate: Optional[float] = typer.Option(None, "--rate", help="Poisson arrivals, workflows per second"),
    concurrency: Optional[int] = typer.Option(None, "--concurrency", help=f"closed loop: workflows at once (default {defaults.CONCURRENCY}, as `agentrt bench --workload`)"),
    seed: int = typer.Option(defaults.SEED, "--seed", help="seed: equal seeds give equal traces"),
    noise: float = typer.Option(0.3, "--noise", help="noise of the per-call semantic signal (0 to 10)"),
    block_size: int = typer.Option(defaults.BLOCK_SIZE, "--block-size", help="tokens per hash id"),
    tool_scale: float = typer.Option(1.0, "--tool-scale", help="multiply every tool and think time by this (> 0)"),
    options: list[str] = typer.Option([], "--set", help="generator option, e.g. --set system_tokens=14000 (repeatable; the generator's docstring lists them)"),
) -> None:
    """Generate a workflow trace from a workload generator."""
    from agentrt.trace.writer import write_trace
    from agentrt.workloads.base import GenConfig
    from agentrt.workloads.registry import get_workload

    wl = get_workload(name, _generator_options(options))
    _arrivals(rate, concurrency)
    from agentrt.trace.limits import MAX_WORKFLOWS
    if not 0 < workflows <= MAX_WORKFLOWS:
        raise AgentrtError(f"--workflows must be from 1 to {MAX_WORKFLOWS:,}, got {workflows}")
    if seed < 0:
        raise AgentrtError(f"--seed must be >= 0, got {seed}")
    _block_size(block_size)
    positive(tool_scale, "tool_scale", cli=True)
    if not 0.0 <= noise <= 10.0:
        raise AgentrtError(f"--noise must be in [0, 10], got {noise}")
    _trace_name(out)
    output_file(out, "-o")
    if rate is None and concurrency is None:
        concurrency = defaults.CONCURRENCY
    try:
        cfg = GenConfig(workflows=workflows, rate=rate, concurrency=concurrency, seed=seed,
                        noise=noise, block_size=block_size, tool_scale=tool_scale)
    except ValueError as e:
        raise AgentrtError(str(e)) from None
    n = write_trace(out, wl.header(cfg), wl.generate(cfg))
    typer.echo(f"wrote {n} calls of {workflows} {name} workflows to {out}")


def stats(
    trace: Path = typer.Argument(..., help="trace file"),
    as_json: bool = typer.Option(False, "--json", help="print the statistics as JSON"),
) -> None:
    """Per-trace statistics: calls, token sizes, reuse within and across workflows, infinite-cache hit rate."""
    from agentrt.workloads.stats import trace_stats
    st = trace_stats(input_file(trace, "trace"))
    if as_json:
        typer.echo(json.dumps(st.to_json(), indent=2))
        return
    rows = [
        ("workflows", f"{st.workflows:,}"),
        ("calls", f"{st.calls:,}"),
        ("calls per workflow", f"{st.calls_per_workflow:.2f}"),
        ("agents", _agents_line(st.agent_calls)),
        ("agent orders", f"{st.agent_orders:,} distinct"),
        ("mean prompt tokens", f"{st.mean_prompt_tokens:,.0f}"),
        ("largest prompt tokens", f"{st.max_prompt_tokens:,}"),
        ("mean output tokens", f"{st.mean_output_tokens:,.0f}"),
        ("reusable within workflow", f"{st.reuse_within:.1%}"),
        ("reusable across workflows", f"{st.reuse_across:.1%}"),
        ("infinite-cache hit rate", f"{st.infinite_hit_rate:.1%}"),
        ("distinct blocks", f"{st.distinct_blocks:,} x {st.block_size} tokens"),
        ("calls after a tool wait", f"{st.wait_share:.1%} of {st.later_calls:,} later calls"),
        ("tool wait p50/p90/p99", f"{st.wait_p50_ms / 1000:.2f} / {st.wait_p90_ms / 1000:.2f} / "
                                  f"{st.wait_p99_ms / 1000:.2f} s (mean {st.wait_mean_ms / 1000:.2f} s)"),
    ]
    for k, v in rows:
        typer.echo(f"{k:26s} {v}")


def _agents_line(agent_calls: dict[str, int], most: int = 10) -> str:
    """Agents with their call counts, busiest first; past `most` only how many more."""
    top = sorted(agent_calls.items(), key=lambda kv: (-kv[1], kv[0]))
    text = ", ".join(f"{a} ({n})" for a, n in top[:most])
    more = len(top) - most
    return f"{len(top)}: {text}" + (f", and {more} more" if more > 0 else "")


def import_ag2_cmd(
    src: Path = typer.Argument(..., help="directory of AG2 log files (*.json), or one file"),
    out: Path = typer.Option(..., "-o", "--out", help="trace file to write"),
    think_ms: float = typer.Option(3000.0, "--think-ms", help="time of a tool or human step (ms)"),
    tokenizer: str = typer.Option("estimate", "--tokenizer", help="estimate, tiktoken:NAME, quicktok:NAME or hf:PATH"),
    first_is_call: bool = typer.Option(False, "--first-is-call", help="treat the opening message as an LLM call"),
    rate: Optional[float] = typer.Option(None, "--rate", help="Poisson arrivals, workflows per second"),
    concurrency: Optional[int] = typer.Option(None, "--concurrency", help=f"closed loop: workflows at once (default {defaults.CONCURRENCY})"),
    seed: int = typer.Option(defaults.SEED, "--seed", help="seed of the Poisson arrivals"),
    block_size: int = typer.Option(defaults.BLOCK_SIZE, "--block-size", help="tokens per hash id"),
) -> None:
    """Import AG2/AutoGen group-chat logs: one workflow per file; bad files are reported and skipped.

    Exits non-zero only when no file could be imported.
    """
    from agentrt.workloads.ag2 import Ag2Importer, import_ag2

    if not src.exists():
        raise AgentrtError(f"import ag2 {src}: no such directory or file (give a directory of AG2 "
                           f"log files, *.json, or one log file)")
    _arrivals(rate, concurrency)
    _block_size(block_size)
    positive(think_ms, "think_ms", cli=True, allow_zero=True)
    _trace_name(out)
    output_file(out, "-o")
    if rate is None and concurrency is None:
        concurrency = defaults.CONCURRENCY
    imp = Ag2Importer(block_size=block_size, think_ms=think_ms, tokenizer=tokenizer,
                      first_is_call=first_is_call, rate=rate, concurrency=concurrency, seed=seed)
    res = import_ag2(src, out, imp)
    for f, problem in res.errors:
        shown = str(f) if str(f).isprintable() else repr(str(f))   # no control characters on a terminal
        print(f"skipped {shown}: {problem}", file=sys.stderr)
    if res.workflows == 0:             # `out` was left as it was
        if not res.errors:
            raise AgentrtError(f"no AG2 log (*.json) found in {src}")
        raise AgentrtError(f"no log could be imported from {src} ({len(res.errors)} bad, see above)")
    typer.echo(f"wrote {res.calls} calls of {res.workflows} workflows to {out}"
               + (f" ({len(res.errors)} files skipped)" if res.errors else ""))


def register_commands(app: typer.Typer) -> None:
    app.command("workloads")(workloads)
    app.command("generate")(generate)
    app.command("tools")(tools)
    app.command("stats")(stats)
    imp = typer.Typer(help="Import multi-agent logs and foreign traces as workflow traces.",
                      no_args_is_help=True)
    imp.command("ag2")(import_ag2_cmd)
    from agentrt.commands.exchange import register
    register(imp, app)
    app.add_typer(imp, name="import")

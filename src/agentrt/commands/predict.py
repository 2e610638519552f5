"""Predictor commands of the `agentrt` CLI: `agentrt train`.

`agentrt.cli` loads this module and calls `register_commands(app)`. `train` reads a trace (or
generates a workload exactly as `agentrt bench --workload` does), trains the chosen predictor kind
on the split `agentrt bench` holds back for training (the first `--train-fraction` of the
workflows in order of first appearance, `TraceSource.split_size`), saves it with the provenance
of that split (agentrt.predict.provenance), and prints top-1 accuracy and log loss per horizon
step on the rest of the workflows (the ones a bench scores) next to the first-order Markov
baseline on the same split. User errors raise `AgentrtError` (one line, exit status 2 through the
main CLI).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from agentrt.errors import AgentrtError
from agentrt.checks import input_file, output_file


def _console() -> Console:
    return Console() if sys.stdout.isatty() else Console(width=160)


def _fmt(x: float, digits: int) -> str:
    return "-" if x != x else f"{x:.{digits}f}"


def report_table(reports: list) -> Table:
    """Per-step held-out metrics of several TrainReports, side by side."""
    t = Table(title=f"held-out workflows: {reports[0].heldout_workflows}, "
                    f"trained on {reports[0].train_workflows}")
    t.add_column("step", justify="right")
    for r in reports:
        t.add_column(f"{r.kind} top-1", justify="right")
        t.add_column(f"{r.kind} log loss", justify="right")
    t.add_column("samples", justify="right")
    for i, s in enumerate(reports[0].steps):
        row = [str(s.step)]
        for r in reports:
            row += [_fmt(r.steps[i].top1, 3), _fmt(r.steps[i].log_loss, 3)]
        t.add_row(*row, str(s.samples))
    return t


def train(
    trace: Optional[Path] = typer.Option(None, "--trace", help="train on this trace file (.jsonl or .jsonl.gz)"),
    workload: Optional[str] = typer.Option(None, "--workload", help="or on a workload generated in memory"),
    workflows: int = typer.Option(200, "--workflows", help="workflows to generate (with --workload; 200, as `agentrt bench`)"),
    out: Path = typer.Option(..., "-o", "--out", help="write the trained predictor here"),
    kind: str = typer.Option("graphsage", "--predictor-kind", help="graphsage, rgcn or markov"),
    horizon: int = typer.Option(4, "--horizon", help="K: steps predicted ahead"),
    epochs: Optional[int] = typer.Option(None, "--epochs", help="maximum training epochs (early stopping may end sooner)"),
    seed: int = typer.Option(0, "--seed", help="seed of the training and of a generated workload"),
    train_fraction: float = typer.Option(0.25, "--train-fraction", help="train on this share of the workflows, the first ones, as `agentrt bench --train-fraction` holds back; report on the rest"),
    json_path: Optional[Path] = typer.Option(None, "--json", help="write the reports as JSON here"),
) -> None:
    """Train a workflow predictor for PBKV on a bench's training split, save it, report per step."""
    from agentrt.bench.source import file_source, workload_source
    from agentrt.predict.io import KINDS, fit_and_evaluate, save_predictor
    from agentrt.predict.provenance import make_provenance, workflow_digests
    from agentrt.predict.samples import samples_from_calls
    from agentrt.workloads.base import GenConfig

    if (trace is None) == (workload is None):
        raise AgentrtError("give either --trace or --workload")
    if kind not in KINDS:
        raise AgentrtError(f"unknown predictor kind '{kind}'; valid predictor kinds: {', '.join(KINDS)}")
    if horizon < 1:
        raise AgentrtError(f"--horizon must be >= 1, got {horizon}")
    if epochs is not None and epochs < 1:
        raise AgentrtError(f"--epochs must be >= 1, got {epochs}")
    if workflows < 1:
        raise AgentrtError(f"--workflows must be >= 1, got {workflows}")
    if seed < 0:
        raise AgentrtError(f"--seed must be >= 0, got {seed}")
    if not 0.0 <= train_fraction < 1.0:
        raise AgentrtError(f"--train-fraction must be in [0, 1), got {train_fraction}")
    if trace is not None:
        input_file(trace, "--trace")
    else:
        from agentrt.workloads.registry import get_workload
        get_workload(workload)
    output_file(out, "-o")
    if json_path is not None:
        output_file(json_path, "--json", (".json",))
    # the same file a bench generates for --workload (concurrency only changes its header)
    source = file_source(trace) if trace is not None else workload_source(
        workload, GenConfig(workflows=workflows, seed=seed))
    try:
        k = source.split_size(train_fraction)
        if k == 0:
            raise AgentrtError(f"{source.label}: --train-fraction {train_fraction} of "
                               f"{source.workflows} workflows leaves no workflow to train on")
        source.train_workflows = k
        bs = source.header.block_size
        train_s = samples_from_calls(source.train_calls(), bs)
        held = samples_from_calls(source.eval_calls(), bs)
        provenance = make_provenance(str(trace) if trace is not None else source.label, source.path,
                                     source.workflows, train_fraction,
                                     workflow_digests(source.train_calls()))
    finally:
        source.close()
    opts = {} if epochs is None else {"epochs": epochs}
    pred, rep = fit_and_evaluate(kind, train_s, held, horizon, seed, **opts)
    save_predictor(pred, out, provenance)
    reports = [rep]
    if kind != "markov":
        reports.append(fit_and_evaluate("markov", train_s, held, horizon, seed)[1])
    con = _console()
    epochs_run = f", {rep.epochs} epochs" if rep.epochs else ""
    con.print(f"trained {kind} on the first {rep.train_workflows} of {source.workflows} workflows "
              f"({rep.agents} agents) in {rep.train_seconds:.2f} s{epochs_run}; saved to {out}")
    if held:
        con.print(report_table(reports))
    else:
        con.print("no workflows after the training split: no accuracy report")
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        doc = {"source": str(trace) if trace else workload, "model": str(out), "seed": seed,
               "train_fraction": train_fraction,
               "provenance": {key: v for key, v in provenance.items() if key != "train_digests"},
               "reports": [r.to_json() for r in reports]}
        json_path.write_text(json.dumps(doc, indent=2))


def register_commands(app: typer.Typer) -> None:
    app.command("train")(train)

"""Predictor commands of the `agentrt` CLI: `agentrt train`.

`agentrt.cli` loads this module and calls `register_commands(app)`. `train` reads a trace (or
generates a workload in memory), holds out a seeded share of its workflows, trains the chosen
predictor kind on the rest, saves it, and prints top-1 accuracy and log loss per horizon step on
the held-out workflows next to the first-order Markov baseline on the same split. User errors
raise `AgentrtError` (one line, exit status 2 through the main CLI).
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
    workflows: int = typer.Option(400, "--workflows", help="workflows to generate (with --workload)"),
    out: Path = typer.Option(..., "-o", "--out", help="write the trained predictor here"),
    kind: str = typer.Option("graphsage", "--predictor-kind", help="graphsage, rgcn or markov"),
    horizon: int = typer.Option(4, "--horizon", help="K: steps predicted ahead"),
    epochs: Optional[int] = typer.Option(None, "--epochs", help="maximum training epochs (early stopping may end sooner)"),
    seed: int = typer.Option(0, "--seed", help="seed of the split, the training and a generated workload"),
    holdout: float = typer.Option(0.2, "--holdout", help="share of workflows held out for the report (0: train on all)"),
    json_path: Optional[Path] = typer.Option(None, "--json", help="write the reports as JSON here"),
) -> None:
    """Train a workflow predictor for PBKV, save it, and report held-out accuracy per step."""
    from agentrt.predict.io import KINDS, fit_and_evaluate
    from agentrt.predict.samples import samples_from_trace, samples_from_workload, split_samples

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
    if not 0.0 <= holdout < 1.0:
        raise AgentrtError(f"--holdout must be in [0, 1), got {holdout}")
    samples = samples_from_trace(trace) if trace is not None else samples_from_workload(workload, workflows, seed)
    if not samples:
        raise AgentrtError(f"{trace or workload}: no workflows to train on")
    train_s, held = split_samples(samples, holdout, seed)
    opts = {} if epochs is None else {"epochs": epochs}
    pred, rep = fit_and_evaluate(kind, train_s, held, horizon, seed, **opts)
    pred.save(str(out))
    reports = [rep]
    if kind != "markov":
        reports.append(fit_and_evaluate("markov", train_s, held, horizon, seed)[1])
    con = _console()
    epochs_run = f", {rep.epochs} epochs" if rep.epochs else ""
    con.print(f"trained {kind} on {rep.train_workflows} workflows ({rep.agents} agents) in "
              f"{rep.train_seconds:.2f} s{epochs_run}; saved to {out}")
    if held:
        con.print(report_table(reports))
    else:
        con.print("no held-out workflows (--holdout 0): no accuracy report")
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        doc = {"source": str(trace) if trace else workload, "model": str(out), "seed": seed,
               "reports": [r.to_json() for r in reports]}
        json_path.write_text(json.dumps(doc, indent=2))


def register_commands(app: typer.Typer) -> None:
    app.command("train")(train)

"""PBKV-TA with and without a trained predictor, and what its online forecasts are worth.

    python -m benchmarks.online_forecast                 # regimes where the oracle >= 1.3x LRU, and AG2
    python -m benchmarks.online_forecast --workloads gaia --no-docs

A live engine started without `--predictor` runs PBKV-TA with no trained predictor; so does any
agent the predictor never saw (AG2's experts are made up per task). Each row replays the same
trace, memory and scored workflows as the bench would (the first 25% of workflows held back):
- `no predictor`: `pbkv-ta` built with none and `online=false` (every thread density 0: PBKV-LAE
  with anchors kept by their agents' call rates, the behaviour before online forecasts);
- `no predictor, online`: the same with online forecasts (the default);
- `trained`, `trained, online`: the predictor the bench trains on the held-back workflows, with
  online forecasts off and on (`agentrt bench ... --set pbkv-ta.online=false`, and the default).
Generated regimes are rows of the regime sweep (`benchmarks/regimes.py`); their oracle comes from
the sweep's own run. AG2 is `docs/results/ag2.jsonl` (`agentrt import ag2`) at both memory sizes of
`benchmarks/results.py`, its oracle from that script's run.

A second table (`--part cross`) gives PBKV-TA a predictor trained on *another* application whose
agents share names with this one's (swebench and gaia both have a `coder`; financebench and
mtbench a `writer`, ...): the pairs are every two workloads of the sweep whose agent names meet.
Each workload is scored on its regime where the oracle is furthest above LRU, and the foreign
predictor is trained on the other workload's trace of its own such regime (all its workflows).
Columns: `own`: trained on this workload's held-back split (the bench's default); `foreign,
judge off`: the foreign predictor with `online=false` (trusted wherever it knows the agent's
name, as before the forecast judge); `foreign`: the same with the default, where the judge
(`policies/pbkv/forecast_judge.py`) hands an agent to the online model once its forecasts are
decisively worse; `no predictor, online`; and the oracle.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from agentrt.bench.runner import (BenchOptions, engine_config, make_bench_scheduler,
                                  make_trained_policy, plan_split)
from agentrt.bench.source import file_source
from agentrt.engine.simulator import Simulator
from agentrt.policies.pbkv import PBKVTimePolicy
from agentrt.trace.reader import TraceReader
from benchmarks.oracle_gap import hit
from benchmarks.results import DOCS, REPO, write
from benchmarks.tails import rows, trace_of

COLUMNS = ["lru", "no predictor", "no predictor, online", "trained", "trained, online", "oracle"]
HEAD = ["workload", "tool x", "load", "f"]
TEXT_HEADS = {"workload", "predictor trained on", "shared agent names"}
CROSS = ["lru", "own", "foreign, judge off", "foreign", "no predictor, online", "oracle"]
AG2 = {5227: 16, 2613: 16}        # GPU blocks -> concurrency, as benchmarks/results.py runs it


def replays(trace: Path, blocks: int, concurrency: int | None) -> dict[str, float]:
    src = file_source(trace)
    opts = BenchOptions(gpu_blocks=blocks, concurrency=concurrency)
    plan_split(src, ["lru", "pbkv-ta"], opts)
    conc = concurrency or src.header.concurrency
    trained = make_trained_policy("pbkv-ta", src, opts).predictor
    policies = {"lru": make_trained_policy("lru", src, opts),
                "no predictor": PBKVTimePolicy(online=False),
                "no predictor, online": PBKVTimePolicy(online=True),
                "trained": PBKVTimePolicy(predictor=trained, online=False),
                "trained, online": PBKVTimePolicy(predictor=trained, online=True)}
    return replay_each(src, opts, conc, policies)


def replay_each(src, opts: BenchOptions, conc: int, policies: dict) -> dict[str, float]:
    """GPU hit % of each policy on the source's scored calls."""
    cfg = engine_config(opts, src.header.block_size)
    out = {}
    for name, policy in policies.items():
        sim = Simulator(cfg, policy, src.eval_calls(), concurrency=conc, scheduler=make_bench_scheduler(opts))
        sim.run()
        out[name] = hit(sim)
    return out


def hit_table(done: list[dict], head: list[str], columns: list[str]) -> list[str]:
    """Markdown rows: the row's label fields (`head`, text columns first), then hit % per column."""
    aligns = ["---" if h in TEXT_HEADS else "---:" for h in head]
    table = ["| " + " | ".join(head + columns) + " |",
             "| " + " | ".join(aligns + ["---:"] * len(columns)) + " |"]
    for r in done:
        table.append(f"| {r['row']} | " + " | ".join(f"{r['hit'][c]:.1f}" for c in columns) + " |")
    return table


def agents_of(trace: Path) -> set[str]:
    return {c.agent for c in TraceReader(trace) if c.agent is not None}


def cross_replays(trace: Path, blocks: int, foreign: Path) -> dict[str, float]:
    src = file_source(trace)
    opts = BenchOptions(gpu_blocks=blocks)
    plan_split(src, ["lru", "pbkv-ta"], opts)
    own = make_trained_policy("pbkv-ta", src, opts).predictor
    trainer = PBKVTimePolicy()
    reader = TraceReader(foreign)
    trainer.train(iter(reader), reader.header.block_size)
    policies = {"lru": make_trained_policy("lru", src, opts),
                "own": PBKVTimePolicy(predictor=own),
                "foreign, judge off": PBKVTimePolicy(predictor=trainer.predictor, online=False),
                "foreign": PBKVTimePolicy(predictor=trainer.predictor),
                "no predictor, online": PBKVTimePolicy()}
    return replay_each(src, opts, src.header.concurrency, policies)


def cross(d: Path, only: list[str] | None) -> list[dict]:
    """Every ordered pair of sweep workloads whose agent names meet (see the module docstring)."""
    best: dict[str, tuple[float, dict]] = {}   # workload -> (oracle / LRU, its regime row)
    for row in rows(0.0):
        wl = row["workload"]
        ratio = row["results"]["oracle"]["hit_rate"] / max(row["results"]["lru"]["hit_rate"], 1e-9)
        if wl not in best or ratio > best[wl][0]:
            best[wl] = (ratio, row)
    traces = {wl: trace_of(row, d) for wl, (_, row) in best.items()}
    names = {wl: agents_of(t) for wl, t in traces.items()}
    done = []
    for wl, (_, row) in best.items():
        if only is not None and wl not in only:
            continue
        for other in best:
            shared = names[wl] & names[other]
            if other == wl or not shared:
                continue
            res = cross_replays(traces[wl], row["gpu_blocks"], traces[other])
            res["oracle"] = 100.0 * row["results"]["oracle"]["hit_rate"]
            label = (f"{wl} | {row['tool_scale']:g} | {row['concurrency']} | {row['capacity_factor']:g} | "
                     f"{other} | {', '.join(sorted(shared))}")
            done.append({"row": label, "generate": row["generate"], "train_generate": best[other][1]["generate"],
                         "gpu_blocks": row["gpu_blocks"], "hit": res})
            print(f"{label}: " + ", ".join(f"{k} {v:.1f}" for k, v in res.items()), flush=True)
    return done


def write_cross(done: list[dict]) -> None:
    (DOCS / "results" / "online_forecast_cross.json").write_text(json.dumps(done, indent=1))
    table = hit_table(done, HEAD + ["predictor trained on", "shared agent names"], CROSS)
    below = [r["hit"]["foreign, judge off"] - r["hit"]["lru"] for r in done]
    judged = [r["hit"]["foreign"] - r["hit"]["lru"] for r in done]
    write("online-cross", "Built by `python -m benchmarks.online_forecast --part cross` "
                          "(docs/results/online_forecast_cross.json; GPU hit %). PBKV-TA minus LRU with the "
                          f"foreign predictor: {min(below):+.1f} to {max(below):+.1f} points with the judge off, "
                          f"{min(judged):+.1f} to {max(judged):+.1f} with it.\n\n" + "\n".join(table) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.online_forecast", description=__doc__.splitlines()[0])
    ap.add_argument("--min-ratio", type=float, default=1.3, help="regimes where oracle / LRU is at least this")
    ap.add_argument("--workloads", default=None, help="only these workloads (comma-separated; ag2 for the AG2 logs)")
    ap.add_argument("--part", choices=["all", "own", "cross"], default="all",
                    help="own: the regimes and AG2; cross: predictors trained on another workload")
    ap.add_argument("--no-docs", action="store_true")
    a = ap.parse_args()
    only = a.workloads.split(",") if a.workloads else None
    if a.part in ("all", "cross"):
        with tempfile.TemporaryDirectory(prefix="agentrt-cross-") as d:
            got = cross(Path(d), only)
        if got and not a.no_docs:
            write_cross(got)
    if a.part == "cross":
        return
    done = []
    with tempfile.TemporaryDirectory(prefix="agentrt-online-") as d:
        for row in rows(a.min_ratio):
            if only is not None and row["workload"] not in only:
                continue
            res = replays(trace_of(row, Path(d)), row["gpu_blocks"], None)
            res["oracle"] = 100.0 * row["results"]["oracle"]["hit_rate"]
            label = f"{row['workload']} | {row['tool_scale']:g} | {row['concurrency']} | {row['capacity_factor']:g}"
            done.append({"row": label, "generate": row["generate"], "gpu_blocks": row["gpu_blocks"], "hit": res})
            print(f"{label}: " + ", ".join(f"{k} {v:.1f}" for k, v in res.items()), flush=True)
    ag2 = DOCS / "results" / "ag2.jsonl"
    if (only is None or "ag2" in only) and ag2.exists():
        for blocks, conc in AG2.items():
            res = replays(ag2, blocks, conc)
            ref = DOCS / "results" / f"ag2-gpu{blocks}.json"
            res["oracle"] = 100.0 * json.loads(ref.read_text())["results"]["oracle"]["hit_rate"]
            label = f"AG2 logs | - | {conc} | {blocks:,} blocks"
            done.append({"row": label, "trace": str(ag2.relative_to(REPO)), "gpu_blocks": blocks, "hit": res})
            print(f"{label}: " + ", ".join(f"{k} {v:.1f}" for k, v in res.items()), flush=True)
    elif only is None or "ag2" in only:
        print(f"(AG2 skipped: {ag2} not found; `python -m benchmarks.results --only real` imports it)")
    if a.no_docs or not done:
        return
    (DOCS / "results" / "online_forecast.json").write_text(json.dumps(done, indent=1))
    table = hit_table(done, HEAD, COLUMNS)
    gain = [r["hit"]["no predictor, online"] - r["hit"]["no predictor"] for r in done]
    left = [r["hit"]["trained"] - r["hit"]["no predictor, online"] for r in done]
    cmd = "python -m benchmarks.online_forecast" + (f" --min-ratio {a.min_ratio:g}" if a.min_ratio != 1.3 else "")
    write("online", f"Built by `{cmd}` (docs/results/online_forecast.json; GPU hit %). Without a predictor, "
                    f"online forecasts add {min(gain):+.1f} to {max(gain):+.1f} points; the trained predictor is "
                    f"{min(left):+.1f} to {max(left):+.1f} points above them.\n\n" + "\n".join(table) + "\n")


if __name__ == "__main__":
    main()

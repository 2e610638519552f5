"""PBKV-TA with tail survival (`--set pbkv-ta.tails=true`) on the regimes where eviction matters.

    python benchmarks/tails.py                     # regimes where the oracle is >= 1.2x LRU
    python benchmarks/tails.py --min-ratio 1.3     # only those the issue's target counts
    python benchmarks/tails.py --min-ratio 1.3 --seeds 1,2   # those again on more trace seeds

Tail survival: many agents' next prompt does not reuse the last blocks of their previous call
(a scratchpad or ledger rewritten each step, an answer summarised rather than quoted); until that
call arrives those blocks look as live as the rest of the thread. With `tails`, PBKV-TA learns
per agent how many blocks at the end of a thread's path its next call drops, and weighs the block
`j` blocks above the leaf by P(dropped <= j) (`policies/pbkv_time.py`). Nothing is tuned.

Each regime is a row of docs/results/regimes/WORKLOAD.json (written by `benchmarks/regimes.py`):
its trace is generated again with the row's `agentrt generate` command and replayed with
`agentrt bench --trace ... --gpu-blocks B --policies pbkv-ta --set pbkv-ta.tails=true`; LRU, the
oracle, the other policies and PBKV-TA without tails are the row's (the same code replays them
unchanged: `tails` is off by default). Writes docs/results/tails.json and the table between the
`tails` markers of docs/results.md.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from regimes import AGENTRT  # noqa: E402
from results import DOCS, write  # noqa: E402


def rows(min_ratio: float) -> list[dict]:
    out = []
    for path in sorted((DOCS / "results" / "regimes").glob("*.json")):
        for row in json.loads(path.read_text())["rows"]:
            r = row["results"]
            if r["lru"]["hit_rate"] and r["oracle"]["hit_rate"] / r["lru"]["hit_rate"] >= min_ratio:
                out.append(row)
    return out


def run(row: dict, tmp: Path) -> dict:
    trace = tmp / f"{row['workload']}-t{row['tool_scale']:g}-c{row['concurrency']}.jsonl"
    gen = shlex.split(row["generate"])
    gen[gen.index("-o") + 1] = str(trace)
    if not trace.exists():
        subprocess.run([sys.executable, "-m", "agentrt.cli", *gen[1:]], check=True, stdout=subprocess.DEVNULL)
    out = tmp / "out.json"
    cmd = ["bench", "--trace", str(trace), "--gpu-blocks", str(row["gpu_blocks"]), "--policies", "pbkv-ta",
           "--set", "pbkv-ta.tails=true", "--quiet", "--json", str(out)]
    subprocess.run([sys.executable, "-m", "agentrt.cli", *cmd], check=True, stdout=subprocess.DEVNULL)
    hit = json.loads(out.read_text())["results"]["pbkv-ta"]["hit_rate"]
    shown = "agentrt " + " ".join(shlex.quote(c) for c in cmd[:-2]).replace(str(trace), f"{row['workload']}.jsonl")
    return {"hit_rate": hit, "command": shown}


def bench(trace: Path, blocks: int, policies: str, tails: bool, tmp: Path) -> dict:
    out = tmp / "out.json"
    cmd = ["bench", "--trace", str(trace), "--gpu-blocks", str(blocks), "--policies", policies,
           "--set", f"pbkv-ta.tails={str(tails).lower()}", "--quiet", "--json", str(out)]
    subprocess.run([sys.executable, "-m", "agentrt.cli", *cmd], check=True, stdout=subprocess.DEVNULL)
    return {p: r["hit_rate"] for p, r in json.loads(out.read_text())["results"].items()}


def seeded(row: dict, seed: int, tmp: Path) -> dict:
    """The regime on another trace seed: LRU, PBKV-TA and the oracle, then PBKV-TA with tails."""
    trace = tmp / f"{row['workload']}-t{row['tool_scale']:g}-c{row['concurrency']}-s{seed}.jsonl"
    gen = shlex.split(row["generate"])
    gen[gen.index("-o") + 1] = str(trace)
    gen[gen.index("--seed") + 1] = str(seed)
    if not trace.exists():
        subprocess.run([sys.executable, "-m", "agentrt.cli", *gen[1:]], check=True, stdout=subprocess.DEVNULL)
    base = bench(trace, row["gpu_blocks"], "lru,pbkv-ta,oracle", False, tmp)
    base["pbkv-ta+tails"] = bench(trace, row["gpu_blocks"], "pbkv-ta", True, tmp)["pbkv-ta"]
    return base


def seeds_table(runs: list[tuple[dict, dict]], seeds: list[int], min_ratio: float) -> str:
    lines = [f"Built by `python benchmarks/tails.py --min-ratio {min_ratio:g} --seeds {','.join(map(str, seeds))}`: "
             "the same regimes on other trace seeds (the row's `agentrt generate` command with `--seed N`), "
             "PBKV-TA without and with tails in two runs on each trace (`agentrt bench --trace ... --gpu-blocks B "
             "--policies lru,pbkv-ta,oracle`, and `--policies pbkv-ta --set pbkv-ta.tails=true`). Sweep seed 0 "
             "is the table above.\n",
             "| workload | tool x | load | f | " + " | ".join(f"seed {s}: ta / +tails / oracle" for s in seeds)
             + " | mean change (pts, seeds 0 and these) |",
             "| --- | ---: | ---: | ---: | " + " | ".join("---:" for _ in seeds) + " | ---: |"]
    for row, by_seed in runs:
        r = row["results"]
        changes = [0.0 if row.get("_tails") is None else 100 * (row["_tails"] - r["pbkv-ta"]["hit_rate"])]
        cells = []
        for s in seeds:
            x = by_seed[s]
            changes.append(100 * (x["pbkv-ta+tails"] - x["pbkv-ta"]))
            cells.append(f"{100 * x['pbkv-ta']:.1f} / {100 * x['pbkv-ta+tails']:.1f} / {100 * x['oracle']:.1f}")
        lines.append(f"| {row['workload']} | {row['tool_scale']:g} | {row['concurrency']} | {row['capacity_factor']:g} | "
                     + " | ".join(cells) + f" | {sum(changes) / len(changes):+.2f} |")
    return "\n".join(lines) + "\n"


def table(done: list[tuple[dict, dict]], min_ratio: float) -> str:
    lines = [f"Built by `python benchmarks/tails.py --min-ratio {min_ratio:g}`: every regime of the sweep above where "
             f"the oracle is at least {min_ratio:g}x LRU, PBKV-TA with tail survival (`--set pbkv-ta.tails=true`) "
             "against the sweep's own runs (same trace, same memory; each row's commands are in "
             "docs/results/tails.json).\n",
             "| workload | tool x | load | f | lru | pbkv-ta | pbkv-ta + tails | oracle | pbkv-ta / oracle | "
             "+ tails / oracle | best agentrt incl. tails / oracle |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    reached = {"before": 0, "after": 0}
    counted = 0
    worse = []
    for row, t in done:
        r = row["results"]
        lru, ta, orc = r["lru"]["hit_rate"], r["pbkv-ta"]["hit_rate"], r["oracle"]["hit_rate"]
        best_before = max(r[p]["hit_rate"] for p in AGENTRT)
        best_after = max(best_before, t["hit_rate"])
        if orc / lru >= 1.3:
            counted += 1
            reached["before"] += best_before >= 0.95 * orc
            reached["after"] += best_after >= 0.95 * orc
        if t["hit_rate"] < ta - 0.005:
            worse.append(f"{row['workload']} t{row['tool_scale']:g} c{row['concurrency']} f{row['capacity_factor']:g}")
        lines.append(f"| {row['workload']} | {row['tool_scale']:g} | {row['concurrency']} | {row['capacity_factor']:g} | "
                     f"{100 * lru:.1f} | {100 * ta:.1f} | {100 * t['hit_rate']:.1f} | {100 * orc:.1f} | "
                     f"{ta / orc:.2f} | {t['hit_rate'] / orc:.2f} | {best_after / orc:.2f} |")
    lines.append(f"\n{len(done)} regimes. Where the oracle is >= 1.3x LRU ({counted}), the best agentrt policy "
                 f"reaches >= 0.95x the oracle in {reached['before']} without tails and {reached['after']} with them. "
                 f"Tails lose more than 0.5 points against PBKV-TA in {len(worse)}"
                 + (f" ({', '.join(worse)})" if worse else "") + ".\n")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--min-ratio", type=float, default=1.2, help="regimes where the oracle is at least this x LRU")
    ap.add_argument("--seeds", default="", help="run those regimes on these other trace seeds instead (e.g. 1,2)")
    a = ap.parse_args()
    todo = rows(a.min_ratio)
    if a.seeds:
        seeds = [int(x) for x in a.seeds.split(",")]
        sweep = {(d["regime"]["workload"], d["regime"]["tool_scale"], d["regime"]["concurrency"],
                  d["regime"]["capacity_factor"]): d["hit_rate"]
                 for d in json.loads((DOCS / "results" / "tails.json").read_text())}
        runs = []
        with tempfile.TemporaryDirectory(prefix="agentrt-tails-") as d:
            for row in todo:
                row = dict(row, _tails=sweep.get((row["workload"], row["tool_scale"], row["concurrency"],
                                                  row["capacity_factor"])))
                by_seed = {}
                for s in seeds:
                    t0 = time.time()
                    by_seed[s] = seeded(row, s, Path(d))
                    x = by_seed[s]
                    print(f"{row['workload']} t{row['tool_scale']:g} c{row['concurrency']} f{row['capacity_factor']:g} "
                          f"seed {s}: lru {100 * x['lru']:.1f} pbkv-ta {100 * x['pbkv-ta']:.1f} +tails "
                          f"{100 * x['pbkv-ta+tails']:.1f} oracle {100 * x['oracle']:.1f} ({time.time() - t0:.0f} s)",
                          flush=True)
                runs.append((row, by_seed))
        (DOCS / "results" / "tails-seeds.json").write_text(json.dumps(
            [{"regime": {k: row[k] for k in ("workload", "tool_scale", "concurrency", "capacity_factor", "gpu_blocks",
                                              "generate")}, "seeds": by_seed} for row, by_seed in runs], indent=1))
        write("tails-seeds", seeds_table(runs, seeds, a.min_ratio))
        return
    done = []
    with tempfile.TemporaryDirectory(prefix="agentrt-tails-") as d:
        for row in todo:
            t0 = time.time()
            t = run(row, Path(d))
            done.append((row, t))
            r = row["results"]
            print(f"{row['workload']} t{row['tool_scale']:g} c{row['concurrency']} f{row['capacity_factor']:g}: "
                  f"lru {100 * r['lru']['hit_rate']:.1f} pbkv-ta {100 * r['pbkv-ta']['hit_rate']:.1f} "
                  f"+tails {100 * t['hit_rate']:.1f} oracle {100 * r['oracle']['hit_rate']:.1f} "
                  f"({time.time() - t0:.0f} s)", flush=True)
    (DOCS / "results" / "tails.json").write_text(json.dumps(
        [{"regime": {k: row[k] for k in ("workload", "tool_scale", "concurrency", "capacity_factor", "gpu_blocks",
                                          "generate")}, "sweep_command": row["command"], **t} for row, t in done],
        indent=1))
    write("tails", table(done, a.min_ratio))


if __name__ == "__main__":
    main()

"""Applications no policy was written for: every policy against LRU and the oracle on random ones.

    python -m benchmarks.generalise                   # 24 applications x 2 capacities (~15 min, 2 cores)
    python -m benchmarks.generalise --apps 6 --jobs 1 # a quick subset
    python -m benchmarks.generalise --docs-only       # re-render the table from the JSON
    python -m benchmarks.generalise --jobs 1 --rerun cachesage,kvflow,pbkv-lae,pbkv-he,pbkv-ta
        # only these policies, the other figures kept from docs/results/generalise.json

Each application is `agentrt generate random --seed S` (S = 1..apps): the seed draws the agents,
their tools, who sees whose messages, the routing between agents, fan-out and compaction
(`agentrt.workloads.randomapp`), then 80 workflows of it, 8 at once, tool times as drawn. Memory
follows the regime sweep's one rule (`benchmarks/regimes.py`): a GPU pool of f x concurrency x
mean prompt blocks, f in {0.5, 1}. The policies and the training split are the regime sweep's
(the first 25% of workflows train the learned policies; all are scored on the rest), with the
proven bound `belady-held` beside the oracle.

Nothing here was tuned: the applications are drawn after the policies were written, and every
drawn application is reported. Writes docs/results/generalise.json and the table between the
`generalise` markers of docs/notes/results-details.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from agentrt.workloads.randomapp import draw_app
from benchmarks.regimes import AGENTRT, POLICIES, below_held, held_rate, run, verdict
from benchmarks.results import DOCS, check_counts, merge_rerun, rerun_flag, sweep_flags, write

CAPACITY = [0.5, 1.0]
LOAD = 8
WORKFLOWS = 80
OUT = DOCS / "results" / "generalise.json"


def table(rows: list[dict]) -> str:
    out = ["| app (seed) | shape | f | GPU blocks | lru | pbkv-ta | best agentrt | best | oracle | "
           "pbkv-ta / oracle | best / oracle | oracle / LRU | pbkv-ta - LRU (pts) |",
           "| ---: | --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for row in rows:
        r = row["results"]
        best, b, of_oracle, headroom, _ = verdict(row)
        lru, ta, orc = (100 * r[p]["hit_rate"] for p in ("lru", "pbkv-ta", "oracle"))
        out.append(f"| {row['seed']} | {draw_app(row['seed']).describe()} | {row['capacity_factor']:g} | "
                   f"{row['gpu_blocks']:,} | {lru:.1f} | {ta:.1f} | {best} | {100 * b:.1f} | {orc:.1f} | "
                   f"{ta / orc if orc else 1.0:.2f} | {of_oracle:.2f} | {headroom:.2f} | {ta - lru:+.1f} |")
    return "\n".join(out) + "\n\n" + summary(rows)


def summary(rows: list[dict]) -> str:
    def share(p: str, row: dict) -> float:
        r = row["results"]
        return r[p]["hit_rate"] / r["oracle"]["hit_rate"] if r["oracle"]["hit_rate"] else 1.0

    lines = []
    for p in AGENTRT:
        gains = [100 * (row["results"][p]["hit_rate"] - row["results"]["lru"]["hit_rate"]) for row in rows]
        of = [share(p, row) for row in rows]
        below = sum(g < -0.5 for g in gains)
        lines.append(f"| {p} | {statistics.median(gains):+.1f} | {min(gains):+.1f} | {max(gains):+.1f} | "
                     f"{below} | {statistics.median(of):.2f} | {min(of):.2f} |")
    inscope = [row for row in rows if verdict(row)[3] >= 1.3]
    reached = [row for row in inscope if verdict(row)[2] >= 0.95]
    ta_reached = [row for row in inscope if share("pbkv-ta", row) >= 0.95]
    gaps = sorted(g for g in map(below_held, rows) if g is not None)
    of_held = sorted(row["results"]["pbkv-ta"]["hit_rate"] / held_rate(row) for row in rows if held_rate(row))
    held = (f" Against `belady-held` ({len(gaps)} runs; the bound of the LRU replay's stream), the oracle "
            f"is {gaps[0]:.1f} to {gaps[-1]:.1f} points below it (median {statistics.median(gaps):.1f}; "
            f"a negative figure: the oracle's own run, which orders calls differently, passed it) and "
            f"pbkv-ta reaches {of_held[0]:.2f}-{of_held[-1]:.2f} of it (median {statistics.median(of_held):.2f})."
            if gaps else "")
    return ("Per policy over the " + f"{len(rows)} runs (hit rate minus LRU's in points; share of the oracle's hit rate):\n\n"
            "| policy | median vs LRU | worst | best | runs > 0.5 pts below LRU | median / oracle | worst / oracle |\n"
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n" + "\n".join(lines) +
            f"\n\nWhere the oracle reaches at least 1.3x LRU ({len(inscope)} runs), the best agentrt policy "
            f"reaches 0.95x the oracle in {len(reached)} and pbkv-ta alone in {len(ta_reached)}.{held}\n")


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.generalise", description=__doc__.splitlines()[0])
    sweep_flags(ap, json_name="docs/results/generalise.json", apps=True)
    rerun_flag(ap)
    a = ap.parse_args()
    check_counts(ap, a)
    rerun = a.rerun.split(",") if a.rerun else None
    old = json.loads(OUT.read_text())["rows"] if rerun else []
    if a.docs_only:
        doc = json.loads(OUT.read_text())
    else:
        seeds = range(1, a.apps + 1)
        with tempfile.TemporaryDirectory(prefix="agentrt-generalise-") as d, \
                ThreadPoolExecutor(a.jobs) as pool:
            tmp = Path(d)
            # one job per application: its capacities run one after the other on one trace
            futures = [pool.submit(lambda s: [run("random", 1.0, LOAD, f, WORKFLOWS, tmp, s, policies=rerun)
                                              for f in CAPACITY], s)
                       for s in seeds]
            rows = []
            for fut in futures:
                for row in fut.result():
                    if rerun:
                        row = merge_rerun(old, row, ("seed", "capacity_factor"), rerun)
                    rows.append(row)
                    best, b, _, _, _ = verdict(row)
                    r = row["results"]
                    print(f"app {row['seed']:3d} f{row['capacity_factor']:g} {row['gpu_blocks']:>7,} blocks: "
                          f"lru {100 * r['lru']['hit_rate']:.1f} pbkv-ta {100 * r['pbkv-ta']['hit_rate']:.1f} "
                          f"{best} {100 * b:.1f} oracle {100 * r['oracle']['hit_rate']:.1f} "
                          f"({row['seconds']:.0f} s)", flush=True)
        doc = {"workflows": WORKFLOWS, "concurrency": LOAD, "policies": POLICIES, "rows": rows}
        OUT.write_text(json.dumps(doc, indent=1))
    if not a.no_docs:
        write("generalise", "Built by `python -m benchmarks.generalise` (docs/results/generalise.json has "
                            "every run's command); each row's trace is `agentrt generate random --workflows "
                            f"{WORKFLOWS} --seed SEED --concurrency {LOAD}`.\n\n" + table(doc["rows"]))


if __name__ == "__main__":
    main()

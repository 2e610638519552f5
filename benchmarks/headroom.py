"""Where knowing agents pays most: each workload's memory scanned for PBKV-TA's largest gain over LRU.

    python -m benchmarks.headroom                     # 10 workloads x 2 tool scales x 5 capacities (~20 min, 2 cores)
    python -m benchmarks.headroom --workloads hover,gaia --jobs 1
    python -m benchmarks.headroom --docs-only         # re-render the table from the JSON

The regime sweep (`benchmarks/regimes.py`) fixes two capacities per workload (f = 0.5 and 1 of the
live footprint, concurrency x mean prompt blocks). LRU's worst case lies between: a working set a
little larger than memory, reused in cycles (each workflow's threads come back after its other
threads and tools), so that the least recently used block is the one due soonest. This scan runs
each workload (80 workflows, 8 at once, seed 0, tool times x1 and x4) at f = 0.25, 0.5, 0.75, 1
and 1.5 with lru, pbkv-ta and the in-simulator oracle (same memory accounting), and reports, per
workload, the capacity where PBKV-TA's ratio to LRU is largest, beside the oracle's there. Every
point is in docs/results/headroom.json with its command; nothing is tuned but the memory size,
which is the scan's variable, and the whole scan is reported.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmarks.regimes import WORKLOADS, run
from benchmarks.results import DOCS, check_counts, sweep_flags, write

POLICIES = ["lru", "pbkv-ta", "oracle"]
CAPACITY = [0.25, 0.5, 0.75, 1.0, 1.5]
TOOL_SCALES = [1.0, 4.0]
LOAD = 8
WORKFLOWS = 80
OUT = DOCS / "results" / "headroom.json"


def ratios(row: dict) -> tuple[float, float, float, float, float]:
    r = row["results"]
    lru, ta, orc = (100 * r[p]["hit_rate"] for p in POLICIES)
    return lru, ta, orc, ta / lru if lru else float("inf"), orc / lru if lru else float("inf")


def table(rows: list[dict]) -> str:
    out = ["| workload | tool x | f | GPU blocks | lru | pbkv-ta | oracle | pbkv-ta / LRU | oracle / LRU | "
           "pbkv-ta / oracle | largest oracle / LRU in the scan (tool x, f) |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    reached = 0
    for w in dict.fromkeys(r["workload"] for r in rows):
        mine = [r for r in rows if r["workload"] == w]
        best = max(mine, key=lambda r: ratios(r)[3])
        top = max(mine, key=lambda r: ratios(r)[4])
        lru, ta, orc, g, h = ratios(best)
        reached += g >= 2.0
        out.append(f"| {w} | {best['tool_scale']:g} | {best['capacity_factor']:g} | {best['gpu_blocks']:,} | "
                   f"{lru:.1f} | {ta:.1f} | {orc:.1f} | {g:.2f} | {h:.2f} | {ta / orc if orc else 1.0:.2f} | "
                   f"{ratios(top)[4]:.2f} ({top['tool_scale']:g}, {top['capacity_factor']:g}) |")
    n = len({r["workload"] for r in rows})
    return ("\n".join(out) + f"\n\nWorkloads where PBKV-TA reaches 2x LRU at some point of the scan: {reached} of {n}. "
            "Every point of the scan (lru / pbkv-ta / oracle hit %):\n\n" + scan_table(rows))


def scan_table(rows: list[dict]) -> str:
    cols = [(t, f) for t in TOOL_SCALES for f in CAPACITY]
    out = ["| workload | " + " | ".join(f"x{t:g} f{f:g}" for t, f in cols) + " |",
           "| --- | " + " | ".join("---:" for _ in cols) + " |"]
    for w in dict.fromkeys(r["workload"] for r in rows):
        cells = []
        for t, f in cols:
            row = next((r for r in rows if r["workload"] == w and r["tool_scale"] == t
                        and r["capacity_factor"] == f), None)
            cells.append("-" if row is None else "{:.0f} / {:.0f} / {:.0f}".format(*ratios(row)[:3]))
        out.append(f"| {w} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.headroom", description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    sweep_flags(ap, json_name="docs/results/headroom.json")
    a = ap.parse_args()
    check_counts(ap, a)
    if a.docs_only:
        rows = json.loads(OUT.read_text())["rows"]
    else:
        todo = [(w, t) for w in a.workloads.split(",") for t in TOOL_SCALES]
        with tempfile.TemporaryDirectory(prefix="agentrt-headroom-") as d, ThreadPoolExecutor(a.jobs) as pool:
            tmp = Path(d)

            def job(w: str, t: float) -> list[dict]:   # one trace, its capacities in turn
                return [run(w, t, LOAD, f, WORKFLOWS, tmp, policies=POLICIES) for f in CAPACITY]
            futures = [pool.submit(job, w, t) for w, t in todo]
            rows = []
            for fut in futures:
                for row in fut.result():
                    rows.append(row)
                    lru, ta, orc, g, h = ratios(row)
                    print(f"{row['workload']:12s} x{row['tool_scale']:g} f{row['capacity_factor']:<5g} "
                          f"{row['gpu_blocks']:>7,} blocks: lru {lru:.1f} pbkv-ta {ta:.1f} oracle {orc:.1f} "
                          f"({g:.2f}x, oracle {h:.2f}x; {row['seconds']:.0f} s)", flush=True)
        if OUT.exists() and a.workloads != ",".join(WORKLOADS):   # a subset: keep the other workloads
            done = {r["workload"] for r in rows}
            rows = [r for r in json.loads(OUT.read_text())["rows"] if r["workload"] not in done] + rows
        OUT.write_text(json.dumps({"workflows": WORKFLOWS, "concurrency": LOAD, "policies": POLICIES,
                                   "rows": rows}, indent=1))
    if not a.no_docs:
        write("headroom", "Built by `python -m benchmarks.headroom` (docs/results/headroom.json has every "
                          "run's command); each trace is `agentrt generate WORKLOAD --workflows "
                          f"{WORKFLOWS} --seed 0 --concurrency {LOAD} --tool-scale TOOL`, each run "
                          f"`agentrt bench --trace ... --gpu-blocks BLOCKS --policies {','.join(POLICIES)}`.\n\n"
                          + table(rows))


if __name__ == "__main__":
    main()

"""Regime sweep: every workload x tool time x load x capacity, each policy against the oracle.

    python -m benchmarks.regimes                      # all regimes (about 30-60 min on 2 cores)
    python -m benchmarks.regimes --workloads coding,mix --workflows 60   # a quick subset
    python -m benchmarks.regimes --workflows 80 --rerun cachesage,kvflow,pbkv-lae,pbkv-he,pbkv-ta
        # only these policies, the other figures kept from docs/results/regimes/*.json

A regime is one generated trace replayed under every policy in one `agentrt bench` run:
- workload: each generator (`agentrt workloads`), 80 workflows (`--workflows`), seed 0;
- tool time: `--tool-scale` 1 (the generators' tool latencies) and 4 (slower tools, long tests);
- load: 8 and 32 workflows at once (closed loop; the replica is not saturated at 8);
- capacity: the GPU pool as a multiple f of the workload's live footprint, f in {0.5, 1}, where
  the footprint is `concurrency x mean prompt blocks` (one prompt per live workflow: what the
  replica must hold for nothing to be recomputed if each workflow had one thread). The same rule
  for every workload, never a tuned number.
Policies: lru, cachesage, kvflow, pbkv-lae, pbkv-he, pbkv-ta, and the `oracle` (clairvoyant
eviction under the simulator's own memory accounting); beside it the offline bounds over the LRU
replay's stream: `belady-held` (MIN keeping the blocks running calls held: no policy on that
stream beats it) and `belady` (it ignores the memory running requests hold). The first 25% of
workflows train the learned policies and everyone is scored on the rest.

Writes docs/results/regimes/WORKLOAD.json (every run, with its command) and, between the `regimes`
markers of docs/notes/results-details.md, the table with: LRU, the best agentrt policy, the oracle, the bounds,
how far the oracle is below `belady-held` in points, best/oracle and oracle/LRU, best - LRU in points.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.results import DOCS, merge_rerun, pct, rerun_flag, sweep_flags, write

WORKLOADS = ["coding", "swebench", "gaia", "hover", "financebench", "humaneval", "mtbench", "mmlu",
             "gsm8k", "mix"]
TOOL_SCALES = [1.0, 4.0]
LOADS = [8, 32]
CAPACITY = [0.5, 1.0]
POLICIES = ["lru", "cachesage", "kvflow", "pbkv-lae", "pbkv-he", "pbkv-ta", "oracle", "belady-held", "belady"]
AGENTRT = ["cachesage", "kvflow", "pbkv-lae", "pbkv-he", "pbkv-ta"]
BS = 16


def mean_prompt_blocks(trace: Path) -> float:
    from agentrt.trace.reader import TraceReader
    n = total = 0
    for c in TraceReader(trace):
        n += 1
        total += c.input_length
    return total / max(1, n) / BS


def run(workload: str, tool: float, load: int, f: float, workflows: int, tmp: Path,
        seed: int = 0, policies: list[str] | None = None, extra: tuple[str, ...] = ()) -> dict:
    """One regime: generate the trace (once per temp dir), size the memory, run `agentrt bench`
    with `policies` and any `extra` bench arguments (e.g. a scheduler)."""
    trace = tmp / f"{workload}-s{seed}-t{tool:g}-c{load}.jsonl"
    gen = ["agentrt", "generate", workload, "--workflows", str(workflows), "--seed", str(seed),
           "--concurrency", str(load), "--tool-scale", f"{tool:g}", "-o", str(trace)]
    if not trace.exists():
        subprocess.run([sys.executable, "-m", "agentrt.cli", *gen[1:]], check=True,
                       stdout=subprocess.DEVNULL)
    blocks = max(64, int(math.ceil(f * load * mean_prompt_blocks(trace))))
    tag = "".join(x.strip("-") for x in extra)
    out = tmp / f"{trace.stem}-f{f:g}{'-' + tag if tag else ''}.json"
    cmd = ["agentrt", "bench", "--trace", str(trace), "--gpu-blocks", str(blocks),
           "--policies", ",".join(policies or POLICIES), *extra, "--quiet", "--json", str(out)]
    t0 = time.time()
    subprocess.run([sys.executable, "-m", "agentrt.cli", *cmd[1:]], check=True, stdout=subprocess.DEVNULL)
    doc = json.loads(out.read_text())
    shown = [c if c != str(trace) else f"{workload}.jsonl" for c in cmd if c not in ("--json", str(out))]
    return {"workload": workload, "seed": seed, "tool_scale": tool, "concurrency": load, "capacity_factor": f,
            "gpu_blocks": blocks, "generate": " ".join(shlex.quote(c) for c in gen).replace(str(trace), f"{workload}.jsonl"),
            "command": " ".join(shlex.quote(c) for c in shown), "seconds": time.time() - t0,
            "results": {p: {k: r.get(k) for k in ("hit_rate", "ttft_mean_s", "e2e_mean_s",
                                                  "preemptions", "oversize_calls", "safety_net")}
                        for p, r in doc["results"].items()}}


def verdict(row: dict) -> tuple[str, float, float, float, float]:
    r = row["results"]
    best = max(AGENTRT, key=lambda p: r[p]["hit_rate"])
    lru, orc, b = r["lru"]["hit_rate"], r["oracle"]["hit_rate"], r[best]["hit_rate"]
    return best, b, b / orc if orc else 1.0, orc / lru if lru else float("inf"), 100 * (b - lru)


def held_rate(row: dict) -> float | None:
    """The row's `belady-held` hit rate (None where the run has no such bound: runs from before
    it existed)."""
    return (row["results"].get("belady-held") or {}).get("hit_rate")


def below_held(row: dict) -> float | None:
    """Points by which the oracle's hit rate is below `belady-held`'s (None without the bound)."""
    held = held_rate(row)
    return None if held is None else 100 * (held - row["results"]["oracle"]["hit_rate"])


def table(rows: list[dict]) -> str:
    out = ["| workload | tool x | load | f | GPU blocks | lru | best agentrt | best | pbkv-ta | oracle | belady-held | "
           "belady | oracle below held (pts) | best / oracle | oracle / LRU | best - LRU (pts) |",
           "| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
           "| ---: |"]
    for row in rows:
        r = row["results"]
        best, b, of_oracle, headroom, gain = verdict(row)
        out.append(f"| {row['workload']} | {row['tool_scale']:g} | {row['concurrency']} | "
                   f"{row['capacity_factor']:g} | {row['gpu_blocks']:,} | {100 * r['lru']['hit_rate']:.1f} | "
                   f"{best} | {100 * b:.1f} | {100 * r['pbkv-ta']['hit_rate']:.1f} | "
                   f"{100 * r['oracle']['hit_rate']:.1f} | {pct(held_rate(row))} | "
                   f"{100 * r['belady']['hit_rate']:.1f} | {pts_of(below_held(row))} | "
                   f"{of_oracle:.2f} | {headroom:.2f} | {gain:+.1f} |")
    inscope = [row for row in rows if verdict(row)[3] >= 1.3]
    reached = [row for row in inscope if verdict(row)[2] >= 0.95]
    below = [row for row in rows if verdict(row)[4] < -0.5]
    ta_below = [row for row in rows
                if 100 * (row["results"]["pbkv-ta"]["hit_rate"] - row["results"]["lru"]["hit_rate"]) < -0.5]
    gaps = sorted(g for g in map(below_held, rows) if g is not None)
    of_held = sorted(verdict(row)[1] / held_rate(row) for row in rows if held_rate(row))
    above = [g for g in gaps if g < 0]
    held = (f"Against `belady-held` ({len(gaps)} regimes; the bound of the LRU replay's stream), the "
            f"oracle is at most {gaps[-1]:.1f} points below it (median {gaps[len(gaps) // 2]:.1f})"
            + (f" and above it in {len(above)} (by up to {-above[0]:.1f} points: its own run orders "
               "the calls differently)" if above else "")
            + f"; the best agentrt policy reaches {of_held[0]:.2f}-{of_held[-1]:.2f} of it. " if gaps else "")
    summary = (f"\n{len(rows)} regimes. Where the oracle reaches at least 1.3x LRU ({len(inscope)} regimes), "
               f"the best agentrt policy reaches at least 0.95x the oracle in {len(reached)}. {held}"
               f"Regimes where the best agentrt policy is more than 0.5 points below LRU: {len(below)}; "
               f"where pbkv-ta is: {len(ta_below)}.\n")
    return "\n".join(out) + "\n" + summary


def pts_of(x: float | None) -> str:
    """Points, one decimal ("-" where there is no figure)."""
    return "-" if x is None else f"{x:.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.regimes", description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--workflows", type=int, default=80, help="per trace (the published table's 80)")
    sweep_flags(ap, json_name="docs/results/regimes/*.json", jobs=False)
    rerun_flag(ap)
    a = ap.parse_args()
    rerun = a.rerun.split(",") if a.rerun else None
    outdir = DOCS / "results" / "regimes"
    outdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="agentrt-regimes-") as d:
        tmp = Path(d)
        for w in ([] if a.docs_only else a.workloads.split(",")):
            rows = []
            old = json.loads((outdir / f"{w}.json").read_text())["rows"] if rerun else []
            for tool in TOOL_SCALES:
                for load in LOADS:
                    for f in CAPACITY:
                        row = run(w, tool, load, f, a.workflows, tmp, policies=rerun)
                        if rerun:
                            row = merge_rerun(old, row, ("tool_scale", "concurrency", "capacity_factor"), rerun)
                        rows.append(row)
                        best, b, of_oracle, headroom, gain = verdict(row)
                        print(f"{w:12s} tool x{tool:g} c{load:<3d} f{f:g} {row['gpu_blocks']:>7,} blocks: "
                              f"lru {100 * row['results']['lru']['hit_rate']:.1f} {best} {100 * b:.1f} "
                              f"oracle {100 * row['results']['oracle']['hit_rate']:.1f} "
                              f"({of_oracle:.2f} of oracle, oracle {headroom:.2f}x LRU) "
                              f"{row['seconds']:.0f} s", flush=True)
            (outdir / f"{w}.json").write_text(json.dumps({"workflows": a.workflows, "rows": rows}, indent=1))
    if not a.no_docs:
        rows = []
        for w in WORKLOADS:
            f = outdir / f"{w}.json"
            if f.exists():
                rows += json.loads(f.read_text())["rows"]
        cmd = "python -m benchmarks.regimes" + (f" --workflows {a.workflows}" if a.workflows != 100 else "")
        write("regimes", f"Built by `{cmd}`; each row's trace is `agentrt generate WORKLOAD --workflows "
                         f"{a.workflows} --seed 0 --concurrency LOAD --tool-scale TOOL` and its run "
                         "`agentrt bench --trace ... --gpu-blocks BLOCKS --policies "
                         f"{','.join(POLICIES)}` (docs/results/regimes/ has every command).\n\n"
              + table(rows))


if __name__ == "__main__":
    main()

"""PBKV-TA told how long each tool call runs: the regime sweep with announced tool times.

    python -m benchmarks.tool_hints                     # the sweep's regimes where the oracle >= 1.3x LRU
    python -m benchmarks.tool_hints --min-ratio 0 --sigmas 1 --no-docs   # every regime, one error level

A framework that knows which tool it is about to run can say how long it expects it to take (the
vLLM connector's `agentrt.tool_call` hint with `expected_s`; `agentrt bench --tool-hints SIGMA`
simulates it: the trace's own tool time times a lognormal error of that sigma, see
`engine/tool_hints.py`). Each regime is a row of the regime sweep (`benchmarks/regimes.py`, same
trace and memory); PBKV-TA is re-run with announced tool times at each sigma (one `agentrt bench`
per sigma, `--policies pbkv-ta --tool-hints SIGMA`), and compared with the sweep's own runs of
LRU, PBKV-TA and the oracle on the same trace. Nothing else reads the hints, so "best agentrt"
with hints is the larger of the sweep's best and PBKV-TA with hints.

Writes docs/results/tool_hints.json (every figure and command) and, unless --no-docs, the table
between the `tool-hints` markers of docs/notes/results-details.md.
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

from benchmarks.regimes import AGENTRT
from benchmarks.results import DOCS, sweep_flags, write
from benchmarks.tails import rows, trace_of


KEY = ("workload", "tool_scale", "concurrency", "capacity_factor")


def hinted(row: dict, sigma: float, tmp: Path) -> dict:
    """PBKV-TA's hit rate on the regime's trace with tool times announced at `sigma`."""
    trace = trace_of(row, tmp)
    out = tmp / "out.json"
    cmd = ["bench", "--trace", str(trace), "--gpu-blocks", str(row["gpu_blocks"]), "--policies", "pbkv-ta",
           "--tool-hints", f"{sigma:g}", "--quiet"]
    subprocess.run([sys.executable, "-m", "agentrt.cli", *cmd, "--json", str(out)], check=True,
                   stdout=subprocess.DEVNULL)
    hit = json.loads(out.read_text())["results"]["pbkv-ta"]["hit_rate"]
    shown = "agentrt " + " ".join(shlex.quote(c) for c in cmd).replace(str(trace), f"{row['workload']}.jsonl")
    return {"hit_rate": hit, "command": shown}


def name(row: dict) -> str:
    return f"{row['workload']} t{row['tool_scale']:g} c{row['concurrency']} f{row['capacity_factor']:g}"


def table(done: list[tuple[dict, dict]], sigmas: list[float], min_ratio: float) -> str:
    args = f" --min-ratio {min_ratio:g}" if min_ratio != 1.3 else ""
    args += f" --sigmas {','.join(f'{s:g}' for s in sigmas)}" if sigmas != [0.0, 0.5, 1.0] else ""
    head = " | ".join(f"pbkv-ta, sigma {s:g}" for s in sigmas)
    lines = [f"Built by `python -m benchmarks.tool_hints{args}`: every regime of the sweep where the oracle is at "
             f"least {min_ratio:g}x LRU; PBKV-TA re-run with tool times announced with lognormal error sigma "
             "(`agentrt bench --trace ... --gpu-blocks B --policies pbkv-ta --tool-hints SIGMA`; each run's command is "
             "in docs/results/tool_hints.json); LRU, PBKV-TA without hints and the oracle are the sweep's runs on "
             "the same trace and memory. GPU hit %.\n",
             f"| workload | tool x | load | f | lru | pbkv-ta, no hints | {head} | oracle | "
             + " | ".join(f"best / oracle, sigma {s:g}" for s in sigmas) + " |",
             "| --- | ---: | ---: | ---: | ---: | ---: | " + " | ".join("---:" for _ in sigmas) + " | ---: | "
             + " | ".join("---:" for _ in sigmas) + " |"]
    reached = {s: 0 for s in [None, *sigmas]}
    counted = 0
    below = {s: [] for s in sigmas}
    change = {s: [] for s in sigmas}
    for row, by_sigma in done:
        r = row["results"]
        lru, ta, orc = r["lru"]["hit_rate"], r["pbkv-ta"]["hit_rate"], r["oracle"]["hit_rate"]
        best = max(r[p]["hit_rate"] for p in AGENTRT)
        ratios = []
        if orc >= 1.3 * lru:
            counted += 1
            reached[None] += best >= 0.95 * orc
        for s in sigmas:
            h = by_sigma[f"{s:g}"]["hit_rate"]
            change[s].append(100 * (h - ta))
            b = max(best, h)
            ratios.append(f"{b / orc:.3f}")
            if orc >= 1.3 * lru:
                reached[s] += b >= 0.95 * orc
            if h < lru - 0.005:
                below[s].append(name(row))
        lines.append(f"| {row['workload']} | {row['tool_scale']:g} | {row['concurrency']} | {row['capacity_factor']:g} | "
                     f"{100 * lru:.1f} | {100 * ta:.1f} | "
                     + " | ".join(f"{100 * by_sigma[f'{s:g}']['hit_rate']:.1f}" for s in sigmas)
                     + f" | {100 * orc:.1f} | " + " | ".join(ratios) + " |")
    lines.append(f"\n{len(done)} regimes. Where the oracle is >= 1.3x LRU ({counted}), the best agentrt policy reaches "
                 f">= 0.95x the oracle in {reached[None]} without hints, and with hints in "
                 + ", ".join(f"{reached[s]} (sigma {s:g})" for s in sigmas) + ". PBKV-TA with hints more than 0.5 "
                 "points below LRU: " + "; ".join(f"sigma {s:g}: {len(below[s])}"
                                                   + (f" ({', '.join(below[s])})" if below[s] else "")
                                                   for s in sigmas) + ". PBKV-TA with hints against "
                 "without, in points (min / median / max): " + "; ".join(
                     f"sigma {s:g}: {min(c):+.1f} / {sorted(c)[len(c) // 2]:+.1f} / {max(c):+.1f}"
                     for s, c in change.items()) + ".\n")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.tool_hints", description=__doc__.splitlines()[0])
    ap.add_argument("--min-ratio", type=float, default=1.3, help="regimes where the oracle is at least this x LRU")
    ap.add_argument("--sigmas", default="0,0.5,1", help="lognormal errors of the announced tool times")
    sweep_flags(ap, json_name="docs/results/tool_hints.json", jobs=False)
    a = ap.parse_args()
    sigmas = [float(x) for x in a.sigmas.split(",")]
    if a.docs_only:
        saved = {tuple(d["regime"][k] for k in KEY): d["hinted"]
                 for d in json.loads((DOCS / "results" / "tool_hints.json").read_text())}
        done = [(row, saved[tuple(row[k] for k in KEY)]) for row in rows(a.min_ratio)]
        write("tool-hints", table(done, sigmas, a.min_ratio))
        return
    done = []
    with tempfile.TemporaryDirectory(prefix="agentrt-hints-") as d:
        for row in rows(a.min_ratio):
            t0 = time.time()
            by_sigma = {f"{s:g}": hinted(row, s, Path(d)) for s in sigmas}
            done.append((row, by_sigma))
            r = row["results"]
            print(f"{name(row)}: lru {100 * r['lru']['hit_rate']:.1f} pbkv-ta {100 * r['pbkv-ta']['hit_rate']:.1f} "
                  + " ".join(f"s{k} {100 * v['hit_rate']:.1f}" for k, v in by_sigma.items())
                  + f" oracle {100 * r['oracle']['hit_rate']:.1f} ({time.time() - t0:.0f} s)", flush=True)
    text = table(done, sigmas, a.min_ratio)
    if a.no_docs:
        print(text)
        return
    (DOCS / "results" / "tool_hints.json").write_text(json.dumps(
        [{"regime": {k: row[k] for k in ("workload", "tool_scale", "concurrency", "capacity_factor", "gpu_blocks",
                                          "generate")}, "sweep_command": row["command"], "hinted": by_sigma}
         for row, by_sigma in done], indent=1))
    write("tool-hints", text)


if __name__ == "__main__":
    main()

"""vLLM's standard `kv.retain` over tool calls, against PBKV-TA's own estimate of tool times.

    python -m benchmarks.retain_hints                 # the tool-hints regimes (oracle >= 1.3x LRU)
    python -m benchmarks.retain_hints --sigma 0 --no-docs

A framework that knows a call ends in a tool call, and about how long the tool runs, can send
vLLM's standard `kv.retain` for the call's whole context for that long (the agentrt connector
executes it: retained blocks are evicted after every unretained one, within a quarter of the
pool; docs/vllm.md). `agentrt bench --retain-hints SIGMA` simulates that framework: the trace's
own tool time times a lognormal error of that sigma is the retention's duration (the same draw as
`--tool-hints SIGMA`, which instead tells PBKV-TA the announced time). Each regime is a row of
the regime sweep (`benchmarks/regimes.py`, same trace and memory) where the oracle is at least
1.3x LRU (the tool-hints table's). Per regime, three `agentrt bench` runs on the sweep's trace
and GPU blocks:
- `--policies lru,pbkv-ta --retain-hints S`: LRU and PBKV-TA with retention instead of telling
  PBKV-TA (it keeps its own estimate of tool times);
- `--policies pbkv-ta --tool-hints S`: PBKV-TA told the announced times (no retention);
- `--policies pbkv-ta --tool-hints S --retain-hints S`: both.
LRU, PBKV-TA without hints and the oracle are the sweep's runs (same trace, memory and training
split). Writes docs/results/retain_hints.json (every figure and command) and, unless --no-docs,
the table between the `retain-hints` markers of docs/notes/results-details.md.
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

from benchmarks.results import DOCS, sweep_flags, write
from benchmarks.tails import rows, trace_of
from benchmarks.tool_hints import KEY, name

RUNS = {"retain": ["--policies", "lru,pbkv-ta", "--retain-hints"],
        "told": ["--policies", "pbkv-ta", "--tool-hints"],
        "both": ["--policies", "pbkv-ta", "--tool-hints", "{s}", "--retain-hints"]}


def run(row: dict, flags: list[str], sigma: float, tmp: Path) -> dict:
    trace = trace_of(row, tmp)
    out = tmp / "out.json"
    s = f"{sigma:g}"
    cmd = ["bench", "--trace", str(trace), "--gpu-blocks", str(row["gpu_blocks"]),
           *[f.format(s=s) for f in flags], s, "--quiet"]
    subprocess.run([sys.executable, "-m", "agentrt.cli", *cmd, "--json", str(out)], check=True,
                   stdout=subprocess.DEVNULL)
    res = json.loads(out.read_text())["results"]
    shown = "agentrt " + " ".join(shlex.quote(c) for c in cmd).replace(str(trace), f"{row['workload']}.jsonl")
    return {"hit_rate": {p: r["hit_rate"] for p, r in res.items()}, "command": shown}


def table(done: list[tuple[dict, dict]], sigma: float) -> str:
    args = f" --sigma {sigma:g}" if sigma != 0.5 else ""
    lines = [f"Built by `python -m benchmarks.retain_hints{args}`: the regimes of the tool-hints table (the "
             "sweep's where the oracle is at least 1.3x LRU). `+ retain`: the framework sends kv.retain for "
             f"a call's whole context when it ends in a tool call, for its announced tool time (lognormal "
             f"error sigma {sigma:g}; `agentrt bench --trace ... --gpu-blocks B --policies lru,pbkv-ta "
             f"--retain-hints {sigma:g}`, retained blocks within 0.25 of the pool); `told`: PBKV-TA reads "
             f"the same announced times instead (`--tool-hints {sigma:g}`); `both`: the two at once. LRU, "
             "PBKV-TA without hints and the oracle are the sweep's runs on the same trace and memory; "
             "every run's command is in docs/results/retain_hints.json. GPU hit %.\n",
             "| workload | tool x | load | f | lru | lru + retain | pbkv-ta (own estimate) | pbkv-ta + retain | "
             "pbkv-ta told | pbkv-ta told + retain | oracle |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    d_lru, d_ta, d_told = [], [], []
    for row, got in done:
        r = row["results"]
        lru, ta, orc = r["lru"]["hit_rate"], r["pbkv-ta"]["hit_rate"], r["oracle"]["hit_rate"]
        lr, tr = got["retain"]["hit_rate"]["lru"], got["retain"]["hit_rate"]["pbkv-ta"]
        told, both = got["told"]["hit_rate"]["pbkv-ta"], got["both"]["hit_rate"]["pbkv-ta"]
        d_lru.append(100 * (lr - lru))
        d_ta.append(100 * (tr - ta))
        d_told.append(100 * (both - told))
        lines.append(f"| {row['workload']} | {row['tool_scale']:g} | {row['concurrency']} | {row['capacity_factor']:g} | "
                     + " | ".join(f"{100 * v:.1f}" for v in (lru, lr, ta, tr, told, both, orc)) + " |")

    def spread(c: list[float]) -> str:
        c = sorted(c)
        return f"{c[0]:+.1f} / {c[len(c) // 2]:+.1f} / {c[-1]:+.1f}"
    lines.append(f"\n{len(done)} regimes. Retention over tool calls, in points (min / median / max): LRU "
                 f"{spread(d_lru)}; PBKV-TA with its own estimate {spread(d_ta)}; PBKV-TA told the times "
                 f"{spread(d_told)}.\n")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.retain_hints", description=__doc__.splitlines()[0])
    ap.add_argument("--min-ratio", type=float, default=1.3, help="regimes where the oracle is at least this x LRU")
    ap.add_argument("--sigma", type=float, default=0.5, help="lognormal error of the announced tool times")
    sweep_flags(ap, json_name="docs/results/retain_hints.json", jobs=False)
    a = ap.parse_args()
    path = DOCS / "results" / "retain_hints.json"
    if a.docs_only:
        saved = {tuple(d["regime"][k] for k in KEY): d["runs"] for d in json.loads(path.read_text())}
        write("retain-hints", table([(row, saved[tuple(row[k] for k in KEY)]) for row in rows(a.min_ratio)],
                                    a.sigma))
        return
    done = []
    with tempfile.TemporaryDirectory(prefix="agentrt-retain-") as d:
        for row in rows(a.min_ratio):
            t0 = time.time()
            got = {k: run(row, flags, a.sigma, Path(d)) for k, flags in RUNS.items()}
            done.append((row, got))
            print(f"{name(row)}: " + " ".join(f"{k} {json.dumps(v['hit_rate'])}" for k, v in got.items())
                  + f" ({time.time() - t0:.0f} s)", flush=True)
    text = table(done, a.sigma)
    if a.no_docs:
        print(text)
        return
    path.write_text(json.dumps(
        [{"regime": {k: row[k] for k in ("workload", "tool_scale", "concurrency", "capacity_factor", "gpu_blocks",
                                          "generate")}, "sweep_command": row["command"], "runs": got}
         for row, got in done], indent=1))
    write("retain-hints", text)


if __name__ == "__main__":
    main()

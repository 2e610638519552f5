"""How far the in-simulator oracle is from the best possible: `oracle` against `belady-held`.

    python -m benchmarks.oracle_bound                 # ten workloads, a quarter of the memory
    python -m benchmarks.oracle_bound --workloads gaia,team --docs

`oracle` is clairvoyant eviction under the simulator's own memory accounting, a heuristic (next
use from the trace); `belady-held` is MIN keeping the blocks running calls held
(`agentrt.bounds.held`), a bound on every demand-paging policy over the LRU replay's stream.
Each workload is run as `agentrt bench --workload W --workflows 200 --concurrency 16
--gpu-blocks 6430 --policies lru,pbkv-ta,oracle,belady-held,belady` runs it (the docs' "every
workload" setting, a quarter of the preset's KV memory). Writes docs/results/oracle_bound.json;
`--docs` writes the table into docs/notes/results-details.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from agentrt.bench.runner import BenchOptions, run_bench
from agentrt.bench.source import workload_source
from agentrt.workloads.base import GenConfig

REPO = Path(__file__).resolve().parents[1]
POLICIES = ["lru", "pbkv-ta", "oracle", "belady-held", "belady"]
WORKFLOWS, CONC, GPU_BLOCKS = 200, 16, 6430
START, END = "<!-- oracle-bound:start -->", "<!-- oracle-bound:end -->"
# the workloads of the docs' "every workload" tables, and team
DEFAULT_WORKLOADS = ["team", "hover", "swebench", "financebench", "mmlu", "mtbench", "gaia", "gsm8k",
                     "humaneval", "mix"]


def run(workload: str) -> dict:
    src = workload_source(workload, GenConfig(workflows=WORKFLOWS, seed=0, concurrency=CONC))
    try:
        doc = run_bench(src, POLICIES, BenchOptions(gpu_blocks=GPU_BLOCKS, concurrency=CONC))
    finally:
        src.close()
    return {"workload": workload, **{p: doc["results"][p]["hit_rate"] for p in POLICIES}}


def markdown(doc: dict) -> str:
    lines = [f"Built by `{doc['command']}` (docs/results/oracle_bound.json, {doc['seconds']:.0f} s). "
             f"GPU token hit %, {WORKFLOWS} workflows, {CONC} at once, {GPU_BLOCKS:,} GPU blocks, seed 0; "
             "the bounds over the LRU replay's stream.", "",
             "| workload | lru | pbkv-ta | oracle | belady-held | belady | oracle below belady-held (points) | "
             "pbkv-ta / belady-held |", "|---|---|---|---|---|---|---|---|"]
    for r in doc["runs"]:
        cells = [r["workload"]] + [f"{100 * r[p]:.1f}" for p in POLICIES]
        cells += [f"{100 * (r['belady-held'] - r['oracle']):.1f}", f"{r['pbkv-ta'] / r['belady-held']:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_docs(doc: dict) -> None:
    page = REPO / "docs" / "notes" / "results-details.md"
    text = page.read_text()
    a, b = text.index(START) + len(START), text.index(END)
    page.write_text(text[:a] + "\n" + markdown(doc) + "\n" + text[b:])
    print(f"updated {page}")


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.oracle_bound", description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default=None, help="comma-separated (default: every generated workload)")
    ap.add_argument("--out", default=str(REPO / "docs" / "results" / "oracle_bound.json"))
    ap.add_argument("--docs", action="store_true", help="write the table into docs/notes/results-details.md")
    ap.add_argument("--docs-only", default=None, metavar="JSON", help="rebuild the docs table from this JSON")
    a = ap.parse_args()
    if a.docs_only:
        return write_docs(json.loads(Path(a.docs_only).read_text()))
    names = a.workloads.split(",") if a.workloads else DEFAULT_WORKLOADS
    command = "python -m benchmarks.oracle_bound" + (f" --workloads {a.workloads}" if a.workloads else "")
    t0 = time.time()
    doc = {"command": command, "runs": []}
    for w in names:
        t = time.time()
        doc["runs"].append(run(w))
        r = doc["runs"][-1]
        print(f"  {w}: lru {r['lru']:.1%}  pbkv-ta {r['pbkv-ta']:.1%}  oracle {r['oracle']:.1%}  "
              f"belady-held {r['belady-held']:.1%}  belady {r['belady']:.1%}  ({time.time() - t:.0f} s)",
              flush=True)
    doc["seconds"] = time.time() - t0
    Path(a.out).write_text(json.dumps(doc, indent=1))
    print(markdown(doc))
    if a.docs:
        write_docs(doc)


if __name__ == "__main__":
    sys.exit(main())

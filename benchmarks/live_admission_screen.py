"""Where a live admission run is worth its hour: the simulator's screen of live-scale configurations.

    python -m benchmarks.live_admission_screen      # about 5 minutes on 2 cores; writes the JSON and the docs
    python -m benchmarks.live_admission_screen --docs-only

`benchmarks/live_admission.py` takes about an hour per configuration on this machine's live
engine. Before spending that, this runs its whole method (stock vLLM's sustainable rate by
bisection, 0.8x and 1.2x of it, each pair, goodput) with the simulator standing in for every live
run (`live_admission.py --sim-only`) on the preset measured on the engine, over a fixed grid of
workloads, token scales and pool sizes chosen to span the regimes (pool holding a fraction of one
session's context up to several), not tuned to any outcome. Each row is what the simulator
predicts the live run would find: the best agentrt pair's mean workflow E2E speed-up over stock
vLLM at 1.2x, whether its p99 is no worse, and goodput. These are predictions on a preset whose
TTFT the fidelity tables show to be optimistic (docs/notes/results-details.md, "The simulator
against the engine"); they say where to look, not what the engine does.

Writes docs/results/engine/admission-screen-sim.json (marked `sim_only`; the live tables never
shows it) and the table between the `live-admission-screen` markers of
docs/notes/results-details.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from benchmarks.live_admission_report import RESULTS
from benchmarks.results import write

PRESET = "docs/results/engine/preset-vllm-cpu-tiny-256x32.json"
# (workload, workflows, token scale, pool blocks of 32 tokens)
GRID = [("team", 24, 0.5, 256), ("team", 48, 0.5, 128), ("team", 48, 0.5, 512),
        ("coding", 12, 0.125, 512), ("coding", 24, 0.0625, 128), ("coding", 24, 0.125, 256),
        ("coding", 24, 0.125, 1024), ("swebench", 24, 0.125, 96), ("swebench", 24, 0.125, 256),
        ("swebench", 24, 0.25, 512), ("mix", 48, 0.25, 128), ("mix", 48, 0.5, 512), ("mix", 96, 0.25, 256)]
JSON = RESULTS / "admission-screen-sim.json"


def screen_one(workload: str, workflows: int, scale: float, blocks: int, preset: str, work: Path) -> dict:
    from benchmarks import live_admission
    args = ["--sim-only", "--workload", workload, "--workflows", str(workflows), "--seed", "0",
            "--scale", str(scale), "--vllm-blocks", str(blocks), "--bisect", "3", "--goodput-steps", "1",
            "--preset-file", preset, "--work-dir", str(work), "--json", str(work / "screen.json")]
    row = {"workload": workload, "workflows": workflows, "scale": scale, "vllm_blocks": blocks,
           "command": "python -m benchmarks.live_admission " + " ".join(args[:-4])}
    try:
        ns = live_admission.parse(args)
        doc = live_admission.run(ns)
    except SystemExit as e:        # stock past the SLO at every rate tried, and the like
        return {**row, "error": str(e)}
    hi = doc["loads"]["1.2"]
    best = doc["criteria"].get("best_pair")
    g = doc["goodput"].get(best) or 0.0
    # no probe above the best pair's goodput failed the SLO: the figure is a lower bound
    open_ = not any(r > g and (p is None or p > doc["slo_ttft_p90_s"])
                    for r, p in doc["goodput_points"].get(best, []))
    return {**row, "sustainable_rate": doc["sustainable_rate"], "criteria": doc["criteria"],
            "goodput_lower_bound": open_, "e2e_mean_s_at_1.2": {p: m.get("e2e_mean_s") for p, m in hi.items()}}


def markdown(doc: dict) -> str:
    lines = [f"Simulator only, on `{doc['preset']}`; written by `{doc['command']}` "
             f"({doc['seconds']} s). Each row's own command is in the JSON.", "",
             "| workload | workflows | token scale | pool blocks | stock's rate /s | best pair | "
             "E2E speed-up at 1.2x | p99 no worse | goodput x (>=: no probe above it failed) |",
             "| --- | ---: | ---: | ---: | ---: | --- | ---: | --- | ---: |"]
    for r in doc["rows"]:
        head = f"| {r['workload']} | {r['workflows']} | {r['scale']:g} | {r['vllm_blocks']} |"
        if "error" in r:
            lines.append(f"{head} | {r['error'][:60]} | | | |")
            continue
        c = r["criteria"]
        lines.append(f"{head} {r['sustainable_rate']:.3f} | {c.get('best_pair', '')} | "
                     f"{c.get('e2e_mean_x_at_1.2', 0):.2f}x | {c.get('e2e_p99_no_worse_at_1.2')} | "
                     f"{'>=' if r.get('goodput_lower_bound') else ''}{c.get('goodput_x', 0):.2f} |")
    ok = [r for r in doc["rows"] if "error" not in r]
    if ok:
        top = max(ok, key=lambda r: r["criteria"].get("e2e_mean_x_at_1.2", 0))
        lines += ["", f"Largest predicted speed-up: {top['criteria']['e2e_mean_x_at_1.2']:.2f}x "
                      f"({top['workload']}, {top['workflows']} workflows, scale {top['scale']:g}, "
                      f"{top['vllm_blocks']} blocks)."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.live_admission_screen", description=__doc__.split("\n")[0])
    ap.add_argument("--preset-file", default=PRESET)
    ap.add_argument("--work-dir", default=None)
    ap.add_argument("--json", default=str(JSON))
    ap.add_argument("--docs-only", action="store_true", help="re-render the docs table from the stored JSON")
    a = ap.parse_args(argv)
    if not a.docs_only:
        import tempfile
        t0 = time.time()
        base = Path(a.work_dir or tempfile.mkdtemp(prefix="agentrt-screen-"))
        rows = []
        for i, cfg in enumerate(GRID, 1):
            print(f"[{i}/{len(GRID)}] {cfg}", flush=True)
            rows.append(screen_one(*cfg, a.preset_file, base / "-".join(map(str, cfg))))
        doc = {"settings": {"sim_only": True}, "preset": a.preset_file, "rows": rows,
               "command": "python -m benchmarks.live_admission_screen " + " ".join(argv or sys.argv[1:]),
               "seconds": round(time.time() - t0)}
        Path(a.json).write_text(json.dumps(doc, indent=1))
        print(f"wrote {a.json}")
    doc = json.loads(Path(a.json).read_text())
    text = markdown(doc)
    print(text)
    if Path(a.json).resolve() == JSON.resolve():
        write("live-admission-screen", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Goodput and end-to-end latency where prefill matters: open-loop arrivals on two presets.

    python benchmarks/goodput.py                 # both presets (about 10-20 min on 2 cores)
    python benchmarks/goodput.py --preset qwen3-32b-h200 --workflows 60

For each preset, one generated workload (`swebench` by default: 10-30k-token repository contexts,
tool waits from the tools table) arrives open loop as a Poisson process at a geometric grid of
workflow rates. Each rate is one `agentrt bench` run of every policy on the same trace, at the
preset's full KV memory. Goodput of a policy = the highest rate of the grid at which its p90 TTFT
stays within the SLO (stated in the output; default 2 s: an interactive agent step). Also
reported, at the highest rate where LRU still meets the SLO (the loaded operating point), each
policy's TTFT mean/p90 and E2E mean/p99 against LRU's.

Writes docs/results/goodput.json and, between the `goodput` markers of docs/results.md, the tables.
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
from results import DOCS, write  # noqa: E402

POLICIES = ["lru", "cachesage", "pbkv-lae", "pbkv-he", "pbkv-ta", "oracle"]
PRESETS = ["qwen3-32b-h200", "llama3.1-8b-h100"]


def run(preset: str, workload: str, rate: float, workflows: int, tmp: Path) -> dict:
    trace = tmp / f"{workload}-r{rate:.4f}.jsonl"
    gen = ["agentrt", "generate", workload, "--workflows", str(workflows), "--seed", "0",
           "--rate", f"{rate:.4f}", "-o", str(trace)]
    if not trace.exists():
        subprocess.run([sys.executable, "-m", "agentrt.cli", *gen[1:]], check=True, stdout=subprocess.DEVNULL)
    out = tmp / f"{preset}-{trace.stem}.json"
    cmd = ["agentrt", "bench", "--trace", str(trace), "--preset", preset, "--policies", ",".join(POLICIES),
           "--quiet", "--json", str(out)]
    t0 = time.time()
    subprocess.run([sys.executable, "-m", "agentrt.cli", *cmd[1:]], check=True, stdout=subprocess.DEVNULL)
    doc = json.loads(out.read_text())
    shown = " ".join(shlex.quote(c) for c in cmd[:-2]).replace(str(trace), f"{workload}-rate.jsonl")
    return {"rate": rate, "seconds": time.time() - t0, "command": shown,
            "generate": " ".join(shlex.quote(c) for c in gen).replace(str(trace), f"{workload}-rate.jsonl"),
            "results": {p: {k: r.get(k) for k in ("hit_rate", "ttft_mean_s", "ttft_p90_s", "ttft_p99_s",
                                                  "e2e_mean_s", "e2e_p99_s", "preemptions")}
                        for p, r in doc["results"].items()}}


def goodput(points: list[dict], policy: str, slo: float) -> float:
    ok = [p["rate"] for p in points if p["results"][policy]["ttft_p90_s"] <= slo]
    return max(ok) if ok else 0.0


def report(preset: str, points: list[dict], slo: float) -> str:
    lines = [f"#### {preset}\n",
             "| workflows/s | " + " | ".join(f"{p} hit % / p90 TTFT s" for p in POLICIES) + " |",
             "| ---: | " + " | ".join("---:" for _ in POLICIES) + " |"]
    for pt in points:
        r = pt["results"]
        lines.append(f"| {pt['rate']:.3f} | " + " | ".join(
            f"{100 * r[p]['hit_rate']:.1f} / {r[p]['ttft_p90_s']:.2f}" for p in POLICIES) + " |")
    g = {p: goodput(points, p, slo) for p in POLICIES}
    lines.append("")
    lines.append(f"Goodput (highest rate of the grid with p90 TTFT <= {slo:g} s), workflows/s: "
                 + ", ".join(f"{p} {g[p]:.3f}" + (f" ({g[p] / g['lru']:.2f}x LRU)" if g['lru'] else "")
                             for p in POLICIES) + ".\n")
    loaded = [pt for pt in points if pt["rate"] == g["lru"]]
    if loaded:
        r = loaded[0]["results"]
        lru = r["lru"]
        lines.append(f"At {g['lru']:.3f} workflows/s (LRU's highest rate within the SLO):\n")
        lines.append("| policy | hit % | TTFT mean s | TTFT p90 s | E2E mean s | E2E p99 s | E2E vs LRU |")
        lines.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
        for p in POLICIES:
            x = r[p]
            lines.append(f"| {p} | {100 * x['hit_rate']:.1f} | {x['ttft_mean_s']:.3f} | {x['ttft_p90_s']:.3f} | "
                         f"{x['e2e_mean_s']:.1f} | {x['e2e_p99_s']:.1f} | {lru['e2e_mean_s'] / x['e2e_mean_s']:.3f}x |")
        lines.append(f"\n`{loaded[0]['generate']}` then `{loaded[0]['command']}`\n")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default=",".join(PRESETS))
    ap.add_argument("--workload", default="swebench")
    ap.add_argument("--workflows", type=int, default=100)
    ap.add_argument("--slo", type=float, default=2.0, help="p90 TTFT SLO in seconds")
    ap.add_argument("--rates", default="0.02,0.03,0.045,0.065,0.1,0.15,0.22,0.33",
                    help="workflow arrival rates to try (workflows/s)")
    ap.add_argument("--no-docs", action="store_true")
    a = ap.parse_args()
    rates = [float(x) for x in a.rates.split(",")]
    doc: dict = {"workload": a.workload, "workflows": a.workflows, "slo_p90_ttft_s": a.slo, "presets": {}}
    shown_rates = f" --rates {a.rates}" if a.rates != ap.get_default("rates") else ""
    parts = [f"Built by `python benchmarks/goodput.py --workload {a.workload} --workflows {a.workflows} "
             f"--slo {a.slo:g}{shown_rates}`: {a.workload}, {a.workflows} workflows, seed 0, Poisson arrivals, each "
             f"preset's full KV memory; SLO p90 TTFT <= {a.slo:g} s.\n"]
    with tempfile.TemporaryDirectory(prefix="agentrt-goodput-") as d:
        for preset in a.preset.split(","):
            points = []
            for rate in rates:
                pt = run(preset, a.workload, rate, a.workflows, Path(d))
                points.append(pt)
                r = pt["results"]
                print(f"{preset} {rate:.3f}/s: " + " ".join(
                    f"{p} {100 * r[p]['hit_rate']:.1f}%/{r[p]['ttft_p90_s']:.2f}s" for p in POLICIES)
                    + f" ({pt['seconds']:.0f} s)", flush=True)
                if all(r[p]["ttft_p90_s"] > a.slo for p in POLICIES):
                    break         # every policy is past the SLO: higher rates only get worse
            doc["presets"][preset] = points
            parts.append(report(preset, points, a.slo))
    (DOCS / "results").mkdir(exist_ok=True)
    (DOCS / "results" / "goodput.json").write_text(json.dumps(doc, indent=1))
    if not a.no_docs:
        write("goodput", "\n".join(parts))


if __name__ == "__main__":
    main()

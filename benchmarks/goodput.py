"""Goodput and end-to-end latency where prefill matters: open-loop arrivals on two presets.

    python -m benchmarks.goodput                 # both presets (about 10 min on 2 cores, the refinement included)
    python -m benchmarks.goodput --preset qwen3-32b-h200 --workflows 60
    python -m benchmarks.goodput --docs-only docs/results/goodput.json   # re-render the docs section

For each preset, one generated workload (`swebench` by default: 10-30k-token repository contexts,
tool waits from the tools table) arrives open loop as a Poisson process at a geometric grid of
workflow rates. Each rate is one `agentrt bench` run of every policy on the same trace, at the
preset's full KV memory. Goodput of a policy = the highest rate at which its p90 TTFT stays within
the SLO (stated in the output; default 2 s: an interactive agent step): first the highest rate of
the grid that does, then `--refine` bisection steps (geometric midpoints, one run of that policy
alone per step) between it and the next rate of the grid, which does not; the bracket left is in
the JSON. Near the knee p90 TTFT is not always monotone in the rate (a few workflows arriving
together decide it), so the rate found is one crossing of the SLO in the bracket, not the only
one. Also reported, at the highest grid rate where LRU still meets the SLO (the loaded operating
point), each policy's TTFT mean/p90 and E2E mean/p99 against LRU's.

Writes docs/results/goodput.json and, between the `goodput` markers of docs/notes/results-details.md, the tables.
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

from benchmarks.results import DOCS, write

POLICIES = ["lru", "cachesage", "pbkv-lae", "pbkv-he", "pbkv-ta", "oracle"]
PRESETS = ["qwen3-32b-h200", "llama3.1-8b-h100"]


def run(preset: str, workload: str, rate: float, workflows: int, tmp: Path,
        policies: list[str] = POLICIES) -> dict:
    trace = tmp / f"{workload}-r{rate:.4f}.jsonl"
    gen = ["agentrt", "generate", workload, "--workflows", str(workflows), "--seed", "0",
           "--rate", f"{rate:.4f}", "-o", str(trace)]
    if not trace.exists():
        subprocess.run([sys.executable, "-m", "agentrt.cli", *gen[1:]], check=True, stdout=subprocess.DEVNULL)
    out = tmp / f"{preset}-{trace.stem}-{len(policies)}.json"
    cmd = ["agentrt", "bench", "--trace", str(trace), "--preset", preset, "--policies", ",".join(policies),
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
    """The highest rate of the grid within the SLO (0: none)."""
    ok = [p["rate"] for p in points if p["results"][policy]["ttft_p90_s"] <= slo]
    return max(ok) if ok else 0.0


def refine(preset: str, workload: str, workflows: int, tmp: Path, points: list[dict], policy: str,
           slo: float, steps: int) -> dict:
    """Bisect between the policy's highest grid rate within the SLO and the next grid rate.
    Returns {"goodput", "bracket": [lo, hi], "steps": [(rate, p90), ...]}; hi is None where the
    grid's last rate was still within the SLO (nothing to bisect), lo 0 where its first was not."""
    lo = goodput(points, policy, slo)
    above = sorted(p["rate"] for p in points if p["rate"] > lo)
    hi = above[0] if above else None
    tried = []
    if lo > 0 and hi is not None:
        for _ in range(steps):
            mid = round((lo * hi) ** 0.5, 5)
            if mid in (round(lo, 5), round(hi, 5)):
                break
            p90 = run(preset, workload, mid, workflows, tmp, [policy])["results"][policy]["ttft_p90_s"]
            tried.append((mid, p90))
            if p90 <= slo:
                lo = mid
            else:
                hi = mid
    return {"goodput": lo, "bracket": [lo, hi], "steps": tried}


def report(preset: str, points: list[dict], slo: float, refined: dict | None = None) -> str:
    lines = [f"#### {preset}\n",
             "| workflows/s | " + " | ".join(f"{p} hit % / p90 TTFT s" for p in POLICIES) + " |",
             "| ---: | " + " | ".join("---:" for _ in POLICIES) + " |"]
    for pt in points:
        r = pt["results"]
        lines.append(f"| {pt['rate']:.3f} | " + " | ".join(
            f"{100 * r[p]['hit_rate']:.1f} / {r[p]['ttft_p90_s']:.2f}" for p in POLICIES) + " |")
    g = {p: goodput(points, p, slo) for p in POLICIES}
    lines.append("")
    lines.append(f"Goodput on the grid (highest rate of the grid with p90 TTFT <= {slo:g} s), workflows/s: "
                 + ", ".join(f"{p} {g[p]:.3f}" + (f" ({g[p] / g['lru']:.2f}x LRU)" if g['lru'] else "")
                             for p in POLICIES) + ".\n")
    if refined:
        steps = max(len(refined[p]["steps"]) for p in POLICIES)
        f = {p: refined[p]["goodput"] for p in POLICIES}
        lines.append(f"Goodput refined (up to {steps} bisection steps between the grid rate within the SLO and the "
                     "next one; the rate found, then the bracket left), workflows/s: "
                     + ", ".join(f"{p} {f[p]:.4f}" + (f" ({f[p] / f['lru']:.2f}x LRU)" if f['lru'] else "")
                                 + (f" [{refined[p]['bracket'][0]:.4f}, {refined[p]['bracket'][1]:.4f})"
                                    if refined[p]["bracket"][1] is not None else " (grid's last rate)")
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


def render(doc: dict) -> str:
    """The docs section from a goodput JSON (what `main` writes; `--docs-only` re-renders one)."""
    parts = [f"Built by `{doc['command']}`: {doc['workload']}, {doc['workflows']} workflows, seed 0, Poisson "
             f"arrivals, each preset's full KV memory; SLO p90 TTFT <= {doc['slo_p90_ttft_s']:g} s.\n"]
    for preset, points in doc["presets"].items():
        refined = doc.get("refined", {}).get(preset) or None
        parts.append(report(preset, points, doc["slo_p90_ttft_s"], refined))
        if refined:
            p, steps = next(((p, r["steps"]) for p, r in refined.items() if r["steps"]), (None, []))
            if steps:
                rate = steps[0][0]
                parts.append(f"Each refinement step is one policy on its own trace, e.g. `agentrt generate "
                             f"{doc['workload']} --workflows {doc['workflows']} --seed 0 --rate {rate:.4f} -o "
                             f"{doc['workload']}-rate.jsonl` then `agentrt bench --trace {doc['workload']}-rate.jsonl "
                             f"--preset {preset} --policies {p} --quiet`; docs/results/goodput.json lists every step.\n")
    return "\n".join(parts)


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.goodput", description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default=",".join(PRESETS))
    ap.add_argument("--workload", default="swebench")
    ap.add_argument("--workflows", type=int, default=100)
    ap.add_argument("--slo", type=float, default=2.0, help="p90 TTFT SLO in seconds")
    ap.add_argument("--rates", default="0.02,0.03,0.045,0.065,0.1,0.15,0.22,0.33",
                    help="workflow arrival rates to try (workflows/s)")
    ap.add_argument("--refine", type=int, default=5,
                    help="bisection steps per policy after the grid (0: the grid only)")
    ap.add_argument("--no-docs", action="store_true")
    ap.add_argument("--docs-only", metavar="JSON", default=None,
                    help="write the docs section from a goodput JSON, running nothing")
    a = ap.parse_args()
    if a.docs_only:
        write("goodput", render(json.loads(Path(a.docs_only).read_text())))
        return
    rates = [float(x) for x in a.rates.split(",")]
    shown = f" --rates {a.rates}" if a.rates != ap.get_default("rates") else ""
    if a.refine != ap.get_default("refine"):
        shown += f" --refine {a.refine}"
    doc: dict = {"command": f"python -m benchmarks.goodput --workload {a.workload} --workflows {a.workflows} "
                            f"--slo {a.slo:g}{shown}",
                 "workload": a.workload, "workflows": a.workflows, "slo_p90_ttft_s": a.slo, "presets": {}}
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
            refined = {}
            for p in POLICIES if a.refine > 0 else []:
                refined[p] = refine(preset, a.workload, a.workflows, Path(d), points, p, a.slo, a.refine)
                print(f"{preset} {p}: goodput {refined[p]['goodput']:.4f}/s, bracket {refined[p]['bracket']}, "
                      f"steps {refined[p]['steps']}", flush=True)
            doc["presets"][preset] = points
            doc.setdefault("refined", {})[preset] = refined
    (DOCS / "results").mkdir(exist_ok=True)
    (DOCS / "results" / "goodput.json").write_text(json.dumps(doc, indent=1))
    if not a.no_docs:
        write("goodput", render(doc))


if __name__ == "__main__":
    main()

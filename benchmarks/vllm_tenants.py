"""Two tenants on a live vLLM: does a burst evict the quiet tenant's cache, with and without shares?

    python -m benchmarks.vllm_tenants                 # 3 repeats (about 15 min each on 2 cores)
    python -m benchmarks.vllm_tenants --repeats 1
    python -m benchmarks.vllm_tenants --docs-only     # rebuild the docs table from the JSON
    python -m benchmarks.vllm_tenants --part priorities-only   # add that run to the JSON's repeats
    python -m benchmarks.vllm_tenants --part sybils --label NAME [--seeds 1,3,5]   # plus 10 one-call tenants

Tenant A runs `WORKFLOWS_A` `team` workflows at `RATE_A` workflows/s, tenant B five times as many
at five times the rate (the simulator's two-tenant experiment, `python -m benchmarks.schedulers --part tenants`,
at a size a CPU replays in minutes). Each repeat runs `agentrt bench --engine vllm` on the tiny
local model with a small KV pool (`--vllm-blocks`), so B's working set overflows it:
- A alone (stock vLLM: LRU, FCFS);
- A and B, `--scheduler fair --policies lru`: stock vLLM first (the baseline of the same run),
  then `lru+fair`: vLLM's priority scheduling with `fair`'s start tags as priorities, and the
  connector sharing the pool by tenant (`tenant_shares`, vllm/tenants.py): a tenant over its half
  has its blocks evicted first;
- A and B, `--scheduler fair --policies lru --no-tenant-shares`: the same priorities without the
  shares, to tell the two apart (its stock vLLM run is a second sample of the baseline, kept as
  `A and B, stock vLLM (2nd run)`).
`--part sybils` replays A and B (`--seeds`, default 1, 3, 5) with `SYBILS` more tenants of one 128-token call each
(`with_sybils` of benchmarks/tenant_dilution.py) under `--scheduler fair`: they hold a few
blocks, so a static split of the pool would give each real tenant a twelfth of it. The result
is stored under `--label` (run it with `PYTHONPATH` on an older checkout to measure older
rules) and shown between the `vllm-tenant-dilution` markers of docs/notes/results-details.md.
Reported per run: A's and B's hit rate (cached tokens the responses report over prompt tokens)
and p90 TTFT; the median and range over the repeats. Wall-clock latencies on a shared 2-core
machine are noisy: compare within a repeat. Writes docs/results/engine/vllm_tenants.json and
the table between the `vllm-tenants` markers of docs/notes/results-details.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

from benchmarks.router_setup import write_between
from benchmarks.sched_tenants import two_tenant_trace
from benchmarks.tenant_dilution import with_sybils

WORKLOAD = "team"
WORKFLOWS_A = 6
RATE_A = 0.05
RATIO = 5.0
ENGINE_ARGS = ["--engine", "vllm", "--model-size", "tiny", "--vllm-blocks", "256", "--scale", "0.25",
               "--think-scale", "1.0", "--train-fraction", "0", "--quiet"]
OUT = REPO / "docs" / "results" / "engine" / "vllm_tenants.json"
DOCS = REPO / "docs" / "notes" / "results-details.md"
START, END = "<!-- vllm-tenants:start -->", "<!-- vllm-tenants:end -->"
SYBIL_START, SYBIL_END = "<!-- vllm-tenant-dilution:start -->", "<!-- vllm-tenant-dilution:end -->"
SYBILS = 10


def bench(trace: Path, out: Path, extra: list[str]) -> dict:
    cmd = ["agentrt", "bench", "--trace", str(trace), *ENGINE_ARGS, "--json", str(out), *extra]
    print("  $", " ".join(cmd[:2] + ["--trace", trace.name] + cmd[4:]), flush=True)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())


def tenant(result: dict, name: str) -> dict:
    t = (result.get("tenants") or {}).get(name) or result
    return {"hit_rate": t["hit_rate"], "ttft_p90_s": t["ttft_p90_s"]}


def both_runs(r: dict) -> dict:
    return {"a": tenant(r, "a"), "b": tenant(r, "b"), "connector": {
        k: (r.get("connector") or {}).get(k) for k in ("evicted", "relinks", "policy_tenants_over_share")}}


SHARES = "A and B, fair (priorities + tenant shares)"
PRIORITIES = "A and B, fair (priorities only)"
ORDER = ("A alone, stock vLLM", "A and B, stock vLLM", "A and B, stock vLLM (2nd run)", PRIORITIES, SHARES)


def priorities_only(tmp: Path, seed: int, runs: dict) -> None:
    both = two_tenant_trace(WORKLOAD, RATE_A, WORKFLOWS_A, RATIO, tmp, with_b=True, seed_a=seed)
    ab = bench(both, tmp / f"prio-{seed}.json", ["--policies", "lru", "--scheduler", "fair", "--no-tenant-shares"])
    runs["A and B, stock vLLM (2nd run)"] = both_runs(ab["results"]["lru"])
    runs[PRIORITIES] = both_runs(ab["results"]["lru+fair"])


def run_once(tmp: Path, seed: int) -> dict:
    alone = two_tenant_trace(WORKLOAD, RATE_A, WORKFLOWS_A, RATIO, tmp, with_b=False, seed_a=seed)
    both = two_tenant_trace(WORKLOAD, RATE_A, WORKFLOWS_A, RATIO, tmp, with_b=True, seed_a=seed)
    t0 = time.perf_counter()
    a = bench(alone, tmp / f"alone-{seed}.json", ["--policies", "lru"])
    ab = bench(both, tmp / f"both-{seed}.json", ["--policies", "lru", "--scheduler", "fair"])
    runs = {"A alone, stock vLLM": {"a": tenant(a["results"]["lru"], "a")},
            "A and B, stock vLLM": both_runs(ab["results"]["lru"]), SHARES: both_runs(ab["results"]["lru+fair"])}
    priorities_only(tmp, seed, runs)
    return {"seed": seed, "runs": runs, "wall_s": round(time.perf_counter() - t0, 1)}


def fmt(xs: list[float], unit: str = "", digits: int = 2) -> str:
    """The median and (min-max) of several runs; one run's value alone."""
    if len(xs) == 1:
        return f"{xs[0]:.{digits}f}{unit}"
    return f"{statistics.median(xs):.{digits}f}{unit} ({min(xs):.{digits}f}-{max(xs):.{digits}f})"


def sybils_part(tmp: Path, seed: int = 1) -> dict:
    """Seed `seed`'s A and B plus `SYBILS` one-call tenants: stock vLLM and fair (shares on)."""
    both = two_tenant_trace(WORKLOAD, RATE_A, WORKFLOWS_A, RATIO, tmp, with_b=True, seed_a=seed)
    trace = with_sybils(both, SYBILS, tmp, open_ms=1000.0, tokens=128)
    r = bench(trace, tmp / f"sybils-{seed}.json", ["--policies", "lru", "--scheduler", "fair"])["results"]
    return {"seed": seed, "sybils": SYBILS, "stock": both_runs(r["lru"]), "fair": both_runs(r["lru+fair"])}


def render_sybils(doc: dict) -> str:
    """Per rule set, the median (min-max) over the seeds run; the no-sybils reference is the
    repeats of the table above with the same seeds."""
    runs = doc.get("sybils") or {}
    alone = {str(r["seed"]): r["runs"]["A alone, stock vLLM"]["a"] for r in doc["repeats"]}
    shares = {str(r["seed"]): r["runs"][SHARES] for r in doc["repeats"] if SHARES in r["runs"]}
    seeds = sorted({sd for by_seed in runs.values() for sd in by_seed}, key=int)
    lines = [f"`python -m benchmarks.vllm_tenants --part sybils --label NAME` (the two-tenant traces of the "
             f"table above plus {SYBILS} tenants of one 128-token call each, `--scheduler fair`; A seeds "
             f"{', '.join(seeds)}, one run each, median (min-max); the no-sybils row is the same seeds' "
             "repeats above):", "",
             "| rules | run | A's hit % | A's hit vs alone | A's p90 TTFT s | B's hit % | B's p90 TTFT s |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]

    def row(label: str, run: str, xs: list[tuple[str, dict]]) -> str:
        a = [x["a"] for _, x in xs]
        b = [x["b"] for _, x in xs]
        vs = [x["a"]["hit_rate"] / alone[sd]["hit_rate"] for sd, x in xs if alone.get(sd, {}).get("hit_rate")]
        return (f"| {label} | {run} | {fmt([100 * y['hit_rate'] for y in a], digits=1)} | "
                f"{fmt(vs, unit='x') if vs else ''} | {fmt([y['ttft_p90_s'] for y in a], digits=3)} | "
                f"{fmt([100 * y['hit_rate'] for y in b], digits=1)} | {fmt([y['ttft_p90_s'] for y in b], digits=3)} |")
    ref = [(sd, shares[sd]) for sd in seeds if sd in shares]
    if ref:
        lines.append(row("(table above)", "A and B, fair (no sybils)", ref))
    for label, by_seed in runs.items():
        xs = sorted(by_seed.items(), key=lambda kv: int(kv[0]))
        lines.append(row(label, "A, B and sybils, stock vLLM", [(sd, r["stock"]) for sd, r in xs]))
        lines.append(row(label, "A, B and sybils, fair", [(sd, r["fair"]) for sd, r in xs]))
    return "\n".join(lines)


def render(doc: dict) -> str:
    """The docs table: per run, the median (min-max) over the repeats."""
    labels = [lb for lb in ORDER if all(lb in r["runs"] for r in doc["repeats"])]
    alone = [r["runs"][labels[0]]["a"] for r in doc["repeats"]]
    lines = ["| run | A's hit % | A's hit vs alone | A's p90 TTFT s | A's p90 TTFT vs alone | B's hit % | B's p90 TTFT s |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for lb in labels:
        rs = [r["runs"][lb] for r in doc["repeats"]]
        ah = [100 * x["a"]["hit_rate"] for x in rs]
        at = [x["a"]["ttft_p90_s"] for x in rs]
        hv = [x["a"]["hit_rate"] / al["hit_rate"] if al["hit_rate"] else 0.0 for x, al in zip(rs, alone)]
        tv = [x["a"]["ttft_p90_s"] / al["ttft_p90_s"] for x, al in zip(rs, alone)]
        b = [x.get("b") for x in rs]
        bh = fmt([100 * x["hit_rate"] for x in b], digits=1) if all(b) else ""
        bt = fmt([x["ttft_p90_s"] for x in b], digits=3) if all(b) else ""
        lines.append(f"| {lb} | {fmt(ah, digits=1)} | {fmt(hv, 'x')} | {fmt(at, digits=3)} | {fmt(tv, 'x')} | {bh} | {bt} |")
    lines += ["", "Per repeat (A's seed):", "",
              "| seed | run | A's hit % | A's p90 TTFT s | B's hit % | B's p90 TTFT s |",
              "| ---: | --- | ---: | ---: | ---: | ---: |"]
    for r in doc["repeats"]:
        for lb in labels:
            x = r["runs"][lb]
            b = x.get("b")
            bcols = f"{100 * b['hit_rate']:.1f} | {b['ttft_p90_s']:.3f}" if b else " | "
            lines.append(f"| {r['seed']} | {lb} | {100 * x['a']['hit_rate']:.1f} | {x['a']['ttft_p90_s']:.3f} | {bcols} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.vllm_tenants", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--docs-only", action="store_true", help="rebuild the docs table from --out and exit")
    ap.add_argument("--part", choices=("all", "priorities-only", "sybils"), default="all",
                    help="priorities-only: add the run without shares to every repeat of --out; "
                         "sybils: the one-call tenants run, stored under --label")
    ap.add_argument("--label", default="max-min shares (this checkout)")
    ap.add_argument("--seeds", default="1,3,5", help="--part sybils: A's trace seeds (B's is A's + 1)")
    args = ap.parse_args()
    if args.docs_only:
        write_docs(json.loads(args.out.read_text()))
        return
    if args.part == "sybils":
        for seed in (int(x) for x in args.seeds.split(",")):
            with tempfile.TemporaryDirectory(prefix="agentrt-vllm-tenants-") as d:
                result = sybils_part(Path(d), seed)
            doc = json.loads(args.out.read_text())          # read late: another label may have landed
            doc.setdefault("sybils", {}).setdefault(args.label, {})[str(seed)] = result
            args.out.write_text(json.dumps(doc, indent=1) + "\n")
        print(render_sybils(doc))
        if args.out == OUT:
            write_docs(doc)
        return
    if args.part == "priorities-only":
        doc = json.loads(args.out.read_text())
        with tempfile.TemporaryDirectory(prefix="agentrt-vllm-tenants-") as d:
            for rep in doc["repeats"]:
                print(f"seed {rep['seed']}", flush=True)
                priorities_only(Path(d), rep["seed"], rep["runs"])
                args.out.write_text(json.dumps(doc, indent=1) + "\n")
        print(render(doc))
        if args.out == OUT:
            write_docs(doc)
        return
    doc = {"workload": WORKLOAD, "workflows_a": WORKFLOWS_A, "rate_a": RATE_A, "ratio": RATIO,
           "engine_args": ENGINE_ARGS, "repeats": []}
    with tempfile.TemporaryDirectory(prefix="agentrt-vllm-tenants-") as d:
        for i in range(args.repeats):
            print(f"repeat {i + 1} of {args.repeats}", flush=True)
            doc["repeats"].append(run_once(Path(d), 1 + 2 * i))
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(render(doc))
    if args.out == OUT:
        write_docs(doc)


def write_docs(doc: dict) -> None:
    n = len(doc["repeats"])
    head = (f"`python -m benchmarks.vllm_tenants` ({n} repeat{'s' if n != 1 else ''}, A seeds "
            f"{', '.join(str(r['seed']) for r in doc['repeats'])}; B's seed is A's + 1), from "
            f"docs/results/engine/vllm_tenants.json: median (min-max) over the repeats.\n\n")
    write_between(DOCS, START, END, head + render(doc))
    if doc.get("sybils"):
        write_between(DOCS, SYBIL_START, SYBIL_END, render_sybils(doc))


if __name__ == "__main__":
    main()

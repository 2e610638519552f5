"""Schedulers x eviction policies at a loaded operating point, their goodput, and tenant fairness.

    python -m benchmarks.schedulers                       # all parts (about 30-45 min on 2 cores)
    python -m benchmarks.schedulers --part table --workloads coding
    python -m benchmarks.schedulers --part tenants
    python -m benchmarks.schedulers --part bounds     # the isolated E2E bound of each workload
    python -m benchmarks.schedulers --part refine     # goodput of the best pairs by bisection
    python -m benchmarks.schedulers --part oracle     # goodput with clairvoyant eviction (fcfs, agent)
    python -m benchmarks.schedulers --part docs       # rebuild the tables from the JSON

Every figure is an `agentrt bench` run on a generated trace with Poisson workflow arrivals on the
prefill-heavy preset (qwen3-32b-h200, its full KV memory); each row names its commands.
- Sustainable rate: FCFS + LRU's highest workflow throughput (completed workflows / makespan)
  over a grid of arrival rates around a first overload run (x0.25 ... x2 of the throughput an
  overload reaches). The operating points are `--loads` (default 0.8 and 1.2) of that rate:
  below FCFS + LRU's knee and past it.
- Table: every scheduler with lru, pbkv-lae and pbkv-ta at each operating point: hit rate, TTFT
  p50/p99, E2E mean/p50/p99, and the longest queue wait of any call (the starvation check).
- Isolated bound: each workflow alone on the replica with a cache that never evicts (closed loop,
  one workflow at a time): a lower bound on the mean E2E any scheduler and eviction policy can
  give the same workflows (`isolated_bound`), shown as a row and a column of every table.
- Goodput: the highest rate of a grid (x0.5 ... x1.5 of the sustainable rate) at which a pair's
  p90 TTFT stays within the SLO (default 2 s, an interactive agent step).
- Tenants: tenant A alone at a rate, alone with half the GPU pool (its equal share), then with
  tenant B arriving at 5x A's rate (same workload, separate caches by tenant) under fcfs, fair
  without its chunk cap, and fair; A's hit rate and p90 TTFT against alone, five trace seeds
  (LRU and PBKV-LAE in every run, PBKV-TA alone and under fair).
Every table and goodput run holds back the same first 25% of workflows for training
(`--train-fraction 0.25`), so LRU and the PBKV variants are scored on the same workflows whichever
list a run names; the tenant runs train on a separate trace and score every workflow, so that A's
calls are the same alone and with B.

Writes docs/results/schedulers.json and, between the `schedulers` markers of docs/notes/results-details.md,
the tables. The runs are in sched_runs.py, the goodput searches in sched_goodput.py, the tenant
part in sched_tenants.py; this script holds the table part and the command line.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from benchmarks.results import DOCS, write
from benchmarks.sched_goodput import goodput_part, oracle_goodput, refine_goodput
from benchmarks.sched_runs import (EVICTION, GOODPUT_GRID, PRESET, SCHEDULERS, WORKFLOWS, bench, generate,
                                   sustainable_rate)
from benchmarks.sched_tenants import tenants_md, tenants_part

KEYS = ("hit_rate", "ttft_mean_s", "ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "e2e_mean_s", "e2e_p50_s",
        "e2e_p99_s", "wait_max_s", "preemptions", "workflows", "makespan_s")


def operating_point(workload: str, n: int, rate: float, tmp: Path, log) -> dict:
    """Every scheduler with every eviction policy of EVICTION on one trace."""
    path, gen_cmd = generate(workload, rate, n, tmp)
    rows: dict = {}
    cmd = ""
    for s in SCHEDULERS:
        t0 = time.time()
        doc, cmd = bench(path, EVICTION, s, tmp)
        for p in EVICTION:
            rows[f"{s}+{p}"] = {k: doc["results"][p].get(k) for k in KEYS}
        log(f"  {workload} {rate:.5f}/s {s}: " + " ".join(
            f"{p} {100 * doc['results'][p]['hit_rate']:.1f}% e2e {doc['results'][p]['e2e_mean_s']:.0f}s"
            for p in EVICTION) + f" ({time.time() - t0:.0f} s)")
    return {"rate": rate, "generate": gen_cmd, "command": cmd, "rows": rows}


def table_part(workload: str, loads: list[float], slo: float, tmp: Path, log, old: dict | None,
               with_goodput: bool) -> dict:
    n = WORKFLOWS.get(workload, 150)
    if old and old.get("workflows") == n and old.get("sustainable_rate"):
        mu, probes = old["sustainable_rate"], old.get("capacity_probes", [])
        log(f"  {workload}: sustainable rate {mu:.5f}/s from docs/results/schedulers.json")
    else:
        mu, probes = sustainable_rate(workload, n, tmp, log)
    out = dict(old or {}, workflows=n, sustainable_rate=mu, capacity_probes=probes)
    # the refined and the oracle goodput refine this table's grid: a new grid makes them stale
    # (`--part refine` / `--part oracle` measure them again); the isolated bound does not depend on it
    for stale in ("goodput_refined", "goodput_oracle"):
        out.pop(stale, None)
    points = dict(out.get("points", {}))
    for load in loads:
        points[f"{load:g}"] = dict(operating_point(workload, n, load * mu, tmp, log), load=load)
    out["points"] = points
    if with_goodput:
        g = goodput_part(workload, n, mu, slo, tmp, log)
        out["goodput_grid"], out["goodput"] = g["grid"], g["goodput"]
    return out


def isolated_bound(workload: str, n: int, tmp: Path, log) -> dict:
    """Each workflow alone on the replica (closed loop, one at a time, in trace order) with a cache
    that never evicts: every call runs in a batch of its own and hits whatever any earlier call
    computed. Its E2E is a lower bound on what any scheduler and eviction policy can give the same
    scored workflows, up to one caveat: in a shared run a workflow may hit a prefix that a
    later-starting workflow computed first. Arrival times do not matter (one at a time), so one
    run serves every operating point."""
    path, gen_cmd = generate(workload, 0.01, n, tmp)
    tokens = 0
    with open(path) as f:
        next(f)
        for line in f:
            c = json.loads(line)
            tokens += c["input_length"] + c["output_length"]
    blocks = tokens // 16 + 1                 # more than the whole trace: nothing is ever evicted
    doc, cmd = bench(path, ["lru"], "fcfs", tmp, ["--gpu-blocks", str(blocks), "--concurrency", "1"])
    r = doc["results"]["lru"]
    log(f"  {workload} isolated bound: E2E mean {r['e2e_mean_s']:.0f}s p99 {r['e2e_p99_s']:.0f}s")
    return {"generate": gen_cmd, "command": cmd, **{k: r[k] for k in (
        "hit_rate", "ttft_p50_s", "ttft_p99_s", "e2e_mean_s", "e2e_p50_s", "e2e_p99_s")}}


def table_md(workload: str, d: dict, slo: float) -> str:
    parts = []
    good = d.get("goodput", {})
    for key, pt in sorted(d["points"].items(), key=lambda kv: float(kv[0])):
        base = pt["rows"]["fcfs+lru"]
        iso = d.get("isolated")
        lines = [f"#### {workload}: {d['workflows']} workflows at {pt['rate']:.5f} workflows/s "
                 f"({pt['load']:.0%} of FCFS + LRU's sustainable {d['sustainable_rate']:.5f}/s)\n",
                 "| scheduler + eviction | hit % | TTFT p50 s | TTFT p99 s | E2E mean s | E2E p50 s | E2E p99 s "
                 "| E2E mean vs FCFS+LRU | E2E mean / isolated bound | longest wait s | goodput wf/s |",
                 "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for k, r in pt["rows"].items():
            g = good.get(k)
            vs_iso = f"{r['e2e_mean_s'] / iso['e2e_mean_s']:.2f}x" if iso else "-"
            lines.append(f"| {k} | {100 * r['hit_rate']:.1f} | {r['ttft_p50_s']:.2f} | {r['ttft_p99_s']:.2f} | "
                         f"{r['e2e_mean_s']:.0f} | {r['e2e_p50_s']:.0f} | {r['e2e_p99_s']:.0f} | "
                         f"{base['e2e_mean_s'] / r['e2e_mean_s']:.2f}x | {vs_iso} | {r['wait_max_s']:.0f} | "
                         + (f"{g:.5f}" if g is not None else "-") + " |")
        if iso:
            lines.append(f"| isolated bound | {100 * iso['hit_rate']:.1f} | {iso['ttft_p50_s']:.2f} | "
                         f"{iso['ttft_p99_s']:.2f} | {iso['e2e_mean_s']:.0f} | {iso['e2e_p50_s']:.0f} | "
                         f"{iso['e2e_p99_s']:.0f} | {base['e2e_mean_s'] / iso['e2e_mean_s']:.2f}x | 1.00x | - | - |")
        lines.append(f"\n`{pt['generate']}`; per scheduler: `{pt['command']}` (with `--scheduler` set to "
                     "each name)." + (f" Isolated bound (each workflow alone, a cache that never evicts; "
                     f"any rate gives the same workflows): `{iso['generate']}`, `{iso['command']}`." if iso else "")
                     + "\n")
        parts.append("\n".join(lines))
    if good:
        g0 = good.get("fcfs+lru") or 0.0
        best = max(good.items(), key=lambda kv: kv[1])
        parts.append(f"Goodput on {workload}: highest rate of the grid ({', '.join(f'{f:g}' for f in GOODPUT_GRID)} x "
                     f"the sustainable rate) with p90 TTFT <= {slo:g} s: "
                     + ", ".join(f"{k} {v:.5f}" for k, v in good.items()) + f"; best {best[0]}"
                     + (f" = {best[1] / g0:.2f}x FCFS + LRU" if g0 else " (FCFS + LRU meets the SLO at no rate of the grid)")
                     + ".\n")
        ref = d.get("goodput_refined")
        if ref and ref.get("fcfs+lru", {}).get("rate"):
            r0 = ref["fcfs+lru"]["rate"]
            top = max(ref.items(), key=lambda kv: kv[1]["rate"])
            cmd = next((v["command"] for v in ref.values() if v["command"]), "")
            parts.append("Refined by bisection (4 probes between each pair's highest passing grid rate and the next "
                         "grid rate, or past the grid's top in 1.15x steps if need be; it assumes p90 TTFT rises "
                         "with the rate): "
                         + ", ".join(f"{k} {v['rate']:.5f}" for k, v in ref.items())
                         + f"; best {top[0]} = {top[1]['rate'] / r0:.2f}x FCFS + LRU. Each probe is "
                         f"`agentrt generate {workload} --workflows {d['workflows']} --seed 0 --rate RATE` and a bench "
                         f"run of one pair, e.g. `{cmd}`; docs/results/schedulers.json lists every probe.\n")
            orc = d.get("goodput_oracle")
            if orc:
                cmd = next((v["command"] for v in orc.values() if v["command"]), "")
                parts.append("With clairvoyant eviction (`oracle`; `python -m benchmarks.schedulers --part oracle`: "
                             "the grid scanned from FCFS + LRU's grid goodput, past its top in 1.15x steps if need be, "
                             "then 4 bisection probes): "
                             + ", ".join(f"{k} {v['rate']:.5f} ({v['rate'] / r0:.2f}x FCFS + LRU)"
                                         for k, v in orc.items())
                             + ". The oracle maximises hits, not TTFT, so this is the reference for what "
                             f"eviction can add under each scheduler, not a strict bound. E.g. `{cmd}`.\n")
    return "\n".join(parts)


def legacy(d: dict | None) -> dict | None:
    """A workload entry written by the first version of this script (one operating point)."""
    if d and "rows" in d and "points" not in d:
        d = dict(d)
        pt = {"rate": d.pop("rate"), "generate": d.pop("generate"), "load": d.pop("load"),
              "rows": d.pop("rows"), "command": d.pop("commands", {}).get("agent", "")}
        d["points"] = {f"{pt['load']:g}": pt}
        if "goodput_grid" in d:
            d["goodput_grid"] = d["goodput_grid"]
    return d


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.schedulers", description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=["table", "bounds", "refine", "oracle", "tenants", "docs", "all"],
                    default="all", help="docs: rebuild the tables from docs/results/schedulers.json only")
    ap.add_argument("--workloads", default="coding,swebench,mix")
    ap.add_argument("--loads", default="0.8,1.2", help="operating points, as fractions of the sustainable rate")
    ap.add_argument("--no-goodput", action="store_true")
    ap.add_argument("--slo", type=float, default=2.0, help="p90 TTFT SLO of the goodput, seconds")
    ap.add_argument("--tenant-workload", default="swebench")
    ap.add_argument("--no-docs", action="store_true", help="print only: write neither the JSON nor docs/notes/results-details.md")
    a = ap.parse_args()
    path = DOCS / "results" / "schedulers.json"
    doc = json.loads(path.read_text()) if path.exists() else {}
    doc.update(preset=PRESET, slo_p90_ttft_s=a.slo)
    log = lambda m: print(m, flush=True)  # noqa: E731
    with tempfile.TemporaryDirectory(prefix="agentrt-sched-") as d:
        tmp = Path(d)
        if a.part in ("table", "all"):
            doc.setdefault("workloads", {})
            loads = [float(x) for x in a.loads.split(",")]
            for w in a.workloads.split(","):
                log(f"{w}:")
                doc["workloads"][w] = table_part(w, loads, a.slo, tmp, log, legacy(doc["workloads"].get(w)),
                                                 not a.no_goodput)
                if not a.no_docs:          # keep what finished if a later part fails
                    path.write_text(json.dumps(doc, indent=1))
        if a.part in ("refine", "all"):
            for w in a.workloads.split(","):
                if doc.get("workloads", {}).get(w, {}).get("goodput"):
                    doc["workloads"][w]["goodput_refined"] = refine_goodput(w, doc["workloads"][w], a.slo, tmp, log)
        if a.part in ("oracle", "all"):
            for w in a.workloads.split(","):
                if doc.get("workloads", {}).get(w, {}).get("goodput"):
                    doc["workloads"][w]["goodput_oracle"] = oracle_goodput(w, doc["workloads"][w], a.slo, tmp, log)
                    if not a.no_docs:
                        path.write_text(json.dumps(doc, indent=1))
        if a.part in ("bounds", "all"):
            for w in a.workloads.split(","):
                if w in doc.get("workloads", {}):
                    doc["workloads"][w]["isolated"] = isolated_bound(w, WORKFLOWS.get(w, 150), tmp, log)
        if a.part in ("tenants", "all"):
            doc["tenants"] = tenants_part(a.tenant_workload, 1.2, 5.0, 30, tmp, log)
    if a.no_docs:                          # a trial: print only, leave docs/ as it is
        return
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(doc, indent=1))
    parts = [f"Built by `python -m benchmarks.schedulers` (preset {PRESET}, full KV memory, seed 0, Poisson "
             f"arrivals; every run holds back the first 25% of workflows for training).\n"]
    for w, d in doc.get("workloads", {}).items():
        parts.append(table_md(w, d, doc["slo_p90_ttft_s"]))
    if "tenants" in doc:
        parts.append(tenants_md(doc["tenants"]))
    write("schedulers", "\n".join(parts))


if __name__ == "__main__":
    main()

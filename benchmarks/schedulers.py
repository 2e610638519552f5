"""Schedulers x eviction policies at a loaded operating point, their goodput, and tenant fairness.

    python benchmarks/schedulers.py                       # all parts (about 30-45 min on 2 cores)
    python benchmarks/schedulers.py --part table --workloads coding
    python benchmarks/schedulers.py --part tenants
    python benchmarks/schedulers.py --part bounds     # the isolated E2E bound of each workload
    python benchmarks/schedulers.py --part refine     # goodput of the best pairs by bisection
    python benchmarks/schedulers.py --part oracle     # goodput with clairvoyant eviction (fcfs, agent)
    python benchmarks/schedulers.py --part docs       # rebuild the tables from the JSON

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
the tables.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from results import DOCS, write

PRESET = "qwen3-32b-h200"
SCHEDULERS = ["fcfs", "lpm", "las", "fair", "agent"]
EVICTION = ["lru", "pbkv-lae", "pbkv-ta"]
WORKFLOWS = {"coding": 100, "swebench": 150, "mix": 300}
GOODPUT_GRID = [0.5, 0.65, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5]


def cli(args: list[str]) -> None:
    subprocess.run([sys.executable, "-m", "agentrt.cli", *args], check=True, stdout=subprocess.DEVNULL)


def shown(args: list[str], tmp: Path) -> str:
    return "agentrt " + " ".join(shlex.quote(a) for a in args).replace(str(tmp) + "/", "")


def generate(workload: str, rate: float, workflows: int, tmp: Path) -> tuple[Path, str]:
    path = tmp / f"{workload}-{workflows}-r{rate:.6f}.jsonl"
    args = ["generate", workload, "--workflows", str(workflows), "--seed", "0", "--rate", f"{rate:.6f}",
            "-o", str(path)]
    if not path.exists():
        cli(args)
    return path, shown(args, tmp)


def bench(trace: Path, policies: list[str], scheduler: str, tmp: Path, extra: list[str] = ()) -> tuple[dict, str]:
    out = tmp / "out.json"
    split = [] if "--train" in extra else ["--train-fraction", "0.25"]
    args = ["bench", "--trace", str(trace), "--preset", PRESET, "--policies", ",".join(policies),
            "--scheduler", scheduler, *split, *extra, "--quiet", "--json", str(out)]
    cli(args)
    return json.loads(out.read_text()), shown(args[:-2], tmp)


def throughput(r: dict) -> float:
    return r["workflows"] / r["makespan_s"] if r["makespan_s"] > 0 else 0.0


def sustainable_rate(workload: str, workflows: int, tmp: Path, log) -> tuple[float, list]:
    """FCFS + LRU's highest measured workflow throughput over a grid of arrival rates."""
    probe = 1.0
    path, _ = generate(workload, probe, workflows, tmp)
    doc, _ = bench(path, ["lru"], "fcfs", tmp)
    mu0 = throughput(doc["results"]["lru"])
    points = [(probe, mu0)]
    for f in (0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0):
        rate = mu0 * f
        path, _ = generate(workload, rate, workflows, tmp)
        doc, _ = bench(path, ["lru"], "fcfs", tmp)
        points.append((rate, throughput(doc["results"]["lru"])))
        log(f"  {workload} capacity probe: offered {rate:.5f}/s -> {points[-1][1]:.5f}/s")
    return max(mu for _, mu in points), points


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


def goodput_part(workload: str, n: int, mu: float, slo: float, tmp: Path, log) -> dict:
    grid = []
    for f in GOODPUT_GRID:
        gpath, gcmd = generate(workload, f * mu, n, tmp)
        pt: dict = {"rate": f * mu, "generate": gcmd, "p90": {}}
        for s in SCHEDULERS:
            pols = ["lru", "pbkv-ta"] if s == "agent" else ["lru"]
            doc, _ = bench(gpath, pols, s, tmp)
            for p in pols:
                pt["p90"][f"{s}+{p}"] = doc["results"][p]["ttft_p90_s"]
        grid.append(pt)
        log(f"  {workload} goodput grid {f:.2f}x: " + " ".join(f"{k} {v:.2f}s" for k, v in pt["p90"].items()))
    pairs = list(grid[0]["p90"])
    good = {k: max([pt["rate"] for pt in grid if pt["p90"][k] <= slo], default=0.0) for k in pairs}
    return {"grid": grid, "goodput": good}


class RateProbe:
    """One pair's p90 TTFT at a rate, against the SLO: each probe generates the workload at that
    rate and benches the pair; every probe is kept as [rate, p90], with the last bench command."""

    def __init__(self, workload: str, n: int, scheduler: str, policy: str, slo: float, tmp: Path) -> None:
        self.workload, self.n, self.scheduler, self.policy = workload, n, scheduler, policy
        self.slo, self.tmp = slo, tmp
        self.probes: list = []
        self.command: str | None = None

    def __call__(self, rate: float) -> bool:
        path, _ = generate(self.workload, rate, self.n, self.tmp)
        doc, self.command = bench(path, [self.policy], self.scheduler, self.tmp)
        p90 = doc["results"][self.policy]["ttft_p90_s"]
        self.probes.append([rate, p90])
        return p90 <= self.slo

    def scan_up(self, lo: float, rates: list[float]) -> tuple[float, float | None]:
        """From a passing `lo` through `rates` (ascending) to the first that fails: (the last
        passing rate, that one, or None if every one passed)."""
        for r in rates:
            if not self(r):
                return lo, r
            lo = r
        return lo, None

    def bisect(self, lo: float, hi: float, steps: int) -> float:
        for _ in range(steps):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if self(mid) else (lo, mid)
        return lo

    def shown(self) -> str:
        return ", ".join(f"{r:.5f}: {t:.2f}s" for r, t in self.probes)


def past_top(rates: list[float]) -> list[float]:
    """Rates past the grid's top in steps of 1.15x, for pairs that still meet the SLO there."""
    return [rates[-1] * 1.15 ** k for k in range(1, 7)]


def refine_goodput(workload: str, d: dict, slo: float, tmp: Path, log, steps: int = 4) -> dict:
    """FCFS + LRU's and the best pairs' goodput, refined by bisection between the grid's highest
    passing rate and the next rate of the grid, or the first failing rate past the grid's top in
    steps of 1.15x (`steps` probes; assumes p90 TTFT rises with the rate, which the grid only
    samples)."""
    good, n = d["goodput"], d["workflows"]
    rates = sorted(pt["rate"] for pt in d["goodput_grid"])
    best = max(good.values())
    out: dict = {}
    for k in ["fcfs+lru"] + [k for k, v in good.items() if v == best and k != "fcfs+lru"]:
        lo = good[k]
        if lo <= 0:
            out[k] = {"rate": lo, "probes": [], "command": None}
            continue
        probe = RateProbe(workload, n, *k.split("+"), slo, tmp)
        hi = min((r for r in rates if r > lo), default=None)
        if hi is None:      # it passes at the grid's top: go past it, as `oracle_goodput` does
            lo, hi = probe.scan_up(lo, past_top(rates))
        if hi is not None:
            lo = probe.bisect(lo, hi, steps)
        out[k] = {"rate": lo, "probes": probe.probes, "command": probe.command}
        log(f"  {workload} goodput of {k} refined: {lo:.5f}/s ({probe.shown()})")
    return out


def oracle_goodput(workload: str, d: dict, slo: float, tmp: Path, log, steps: int = 4) -> dict:
    """Goodput with clairvoyant eviction (`oracle`) under FCFS and under `agent`: the grid scanned
    from FCFS + LRU's grid goodput (up while the SLO holds, past the grid's top in steps of 1.15x
    if need be; down while it does not), then `steps` bisection probes, as `refine_goodput` does."""
    n = d["workflows"]
    rates = sorted(pt["rate"] for pt in d["goodput_grid"])
    start = d["goodput"].get("fcfs+lru") or rates[0]
    i = rates.index(start) if start in rates else 0
    out: dict = {}
    for sched in ("fcfs", "agent"):
        probe = RateProbe(workload, n, sched, "oracle", slo, tmp)
        lo = hi = None
        if probe(rates[i]):
            lo, hi = probe.scan_up(rates[i], rates[i + 1:] + past_top(rates))
        else:
            hi = rates[i]
            for r in reversed(rates[:i]):
                if probe(r):
                    lo = r
                    break
                hi = r
        if lo is not None and hi is not None:
            lo = probe.bisect(lo, hi, steps)
        out[f"{sched}+oracle"] = {"rate": lo or 0.0, "probes": probe.probes, "command": probe.command}
        log(f"  {workload} goodput of {sched}+oracle: {lo or 0.0:.5f}/s ({probe.shown()})")
    return out


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
                parts.append("With clairvoyant eviction (`oracle`; `python benchmarks/schedulers.py --part oracle`: "
                             "the grid scanned from FCFS + LRU's grid goodput, past its top in 1.15x steps if need be, "
                             "then 4 bisection probes): "
                             + ", ".join(f"{k} {v['rate']:.5f} ({v['rate'] / r0:.2f}x FCFS + LRU)"
                                         for k, v in orc.items())
                             + ". The oracle maximises hits, not TTFT, so this is the reference for what "
                             f"eviction can add under each scheduler, not a strict bound. E.g. `{cmd}`.\n")
    return "\n".join(parts)


def two_tenant_trace(workload: str, rate_a: float, n_a: int, ratio: float, tmp: Path, with_b: bool,
                     seed_a: int = 1) -> Path:
    """Tenant A's workflows at `rate_a` (generator seed `seed_a`), and with `with_b` tenant B's at
    `ratio` times that rate (seed `seed_a + 1`)."""
    from agentrt.trace.writer import write_trace
    from agentrt.workloads.base import GenConfig
    from agentrt.workloads.registry import get_workload
    wl = get_workload(workload)
    flows: list[tuple[float, int, list]] = []
    specs = [("a", rate_a, n_a, seed_a)] + ([("b", rate_a * ratio, int(n_a * ratio), seed_a + 1)] if with_b else [])
    for tenant, rate, n, seed in specs:
        cfg = GenConfig(workflows=n, rate=rate, seed=seed, tenant=tenant)
        cur: dict[str, list] = {}
        for c in wl.generate(cfg):
            cur.setdefault(c.workflow, []).append(dataclasses.replace(c, workflow=f"{tenant}/{c.workflow}"))
        for i, calls in enumerate(cur.values()):
            flows.append((calls[0].timestamp or 0.0, seed * 10**6 + i, calls))
    flows.sort(key=lambda f: (f[0], f[1]))
    path = tmp / f"tenants-{workload}-{rate_a:.5f}-s{seed_a}-{'ab' if with_b else 'a'}.jsonl"
    write_trace(path, wl.header(GenConfig(workflows=n_a, rate=rate_a)), (c for _, _, cs in flows for c in cs))
    return path


TENANT_SEEDS = (1, 3, 5, 7, 9)
TRAIN_SEED = 101


def tenant_stats(doc: dict, policy: str, tenant: str) -> dict:
    r = doc["results"][policy]
    t = r.get("tenants", {}).get(tenant) or r
    return {k: t.get(k) for k in ("hit_rate", "ttft_mean_s", "ttft_p90_s", "ttft_p99_s", "wait_max_s")}


def tenants_part(workload: str, total_load: float, ratio: float, n_a: int, tmp: Path, log) -> dict:
    """A alone; A alone with half the GPU pool (its equal share: the best `fair` can leave it);
    A with B under fcfs, under fair without the chunk cap, and under fair as it ships. Every run
    scores all of A's workflows (pbkv-lae trains on a separate two-tenant trace), so A's calls are
    the same in every run of a seed."""
    from agentrt.engine.presets import get_preset
    mu, _ = sustainable_rate(workload, WORKFLOWS.get(workload, 150), tmp, log)
    rate_a = total_load * mu / (1.0 + ratio)
    half = get_preset(PRESET).gpu_blocks(16) // 2
    train = two_tenant_trace(workload, rate_a, n_a, ratio, tmp, True, TRAIN_SEED)
    out: dict = {"workload": workload, "sustainable_rate": mu, "rate_a": rate_a, "ratio": ratio,
                 "total_load": total_load, "workflows_a": n_a, "half_pool_blocks": half, "seeds": {}}
    runs = [("alone", False, "fcfs", ["lru", "pbkv-lae", "pbkv-ta"], []),
            ("alone, half the pool", False, "fcfs", ["lru", "pbkv-lae", "pbkv-ta", "oracle"], ["--gpu-blocks", str(half)]),
            ("with B, fcfs", True, "fcfs", ["lru", "pbkv-lae"], []),
            ("with B, fair without the chunk cap", True, "fair", ["lru", "pbkv-lae"], ["--shared-chunk-tokens", "0"]),
            ("with B, fair, chunk cap 2048", True, "fair", ["lru", "pbkv-lae"], ["--shared-chunk-tokens", "2048"]),
            ("with B, fair", True, "fair", ["lru", "pbkv-lae", "pbkv-ta"], [])]
    for seed in TENANT_SEEDS:
        traces = {w: two_tenant_trace(workload, rate_a, n_a, ratio, tmp, w, seed) for w in (False, True)}
        rows = out["seeds"][str(seed)] = {}
        for label, with_b, sched, pols, extra in runs:
            doc, cmd = bench(traces[with_b], pols, sched, tmp, ["--train", str(train), *extra])
            rows[label] = {"command": cmd, "a": {p: tenant_stats(doc, p, "a") for p in pols},
                           "b": {p: tenant_stats(doc, p, "b") for p in pols} if with_b else None}
            log(f"  tenants seed {seed} {label}: " + " ".join(
                f"{p} A {100 * r['hit_rate']:.1f}% p90 {r['ttft_p90_s']:.2f}s" for p, r in rows[label]["a"].items()))
    return out


def _spread(xs: list[float], fmt: str = "{:.2f}x") -> str:
    xs = sorted(xs)
    med = statistics.median(xs)
    return fmt.format(med) + (f" ({fmt.format(xs[0])}-{fmt.format(xs[-1])})" if len(xs) > 1 else "")


def tenants_md(d: dict) -> str:
    if "seeds" not in d:             # written by an earlier version of this script
        return ""
    seeds = list(d["seeds"])
    first = d["seeds"][seeds[0]]
    lines = [f"#### Two tenants on {d['workload']}: A at {d['rate_a']:.5f} workflows/s, B at {d['ratio']:g}x "
             f"that rate (together {d['total_load']:.0%} of FCFS + LRU's sustainable rate)\n",
             f"A's hit rate and p90 TTFT against A alone, and against A alone with half the GPU pool "
             f"({d['half_pool_blocks']:,} blocks: its equal share, the most `fair` owes it); median "
             f"(min-max) over {len(seeds)} trace seeds (A seed s, B seed s + 1; s = {', '.join(seeds)}). "
             f"B's p90 TTFT shows what each rule costs the burst.\n",
             "| run | eviction | A's hit vs alone | A's p90 TTFT vs alone | A's hit vs half-pool alone | "
             "A's p90 TTFT vs half-pool alone | B's p90 TTFT s |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for label in first:
        for p in first[label]["a"]:
            rows = [d["seeds"][s][label] for s in seeds]
            alone = [d["seeds"][s]["alone"]["a"].get(p) or d["seeds"][s]["alone"]["a"]["lru"] for s in seeds]
            halfp = [d["seeds"][s]["alone, half the pool"]["a"].get(p) for s in seeds]
            hit = _spread([r["a"][p]["hit_rate"] / a["hit_rate"] for r, a in zip(rows, alone)])
            p90 = _spread([r["a"][p]["ttft_p90_s"] / a["ttft_p90_s"] for r, a in zip(rows, alone)])
            vs_half = "| "
            if label.startswith("with B") and all(halfp):
                vs_half = (_spread([r["a"][p]["hit_rate"] / h["hit_rate"] for r, h in zip(rows, halfp)]) + " | "
                           + _spread([r["a"][p]["ttft_p90_s"] / h["ttft_p90_s"] for r, h in zip(rows, halfp)]))
            b = _spread([r["b"][p]["ttft_p90_s"] for r in rows], "{:.2f}") if rows[0]["b"] else ""
            lines.append(f"| {label} | {p} | {hit} | {p90} | {vs_half} | {b} |")
    lines += ["\nSeeds (of " + str(len(seeds)) + ") on which A is within 10% of running alone:\n",
              "| run | eviction | A's hit rate >= 0.9x alone | A's p90 TTFT <= 1.1x alone |",
              "| --- | --- | ---: | ---: |"]
    for label in first:
        if label.startswith("with B"):
            for p in first[label]["a"]:
                pairs = [(d["seeds"][sd][label]["a"][p], d["seeds"][sd]["alone"]["a"][p]) for sd in seeds]
                ok_hit = sum(r["hit_rate"] >= 0.9 * a["hit_rate"] for r, a in pairs)
                ok_p90 = sum(r["ttft_p90_s"] <= 1.1 * a["ttft_p90_s"] for r, a in pairs)
                lines.append(f"| {label} | {p} | {ok_hit} | {ok_p90} |")
    lines += ["\nPer seed (A's and B's hit rate in %, p90 TTFT and A's longest admission wait in s):\n",
              "| seed | run | eviction | A's hit | A's p90 TTFT | A's longest wait | B's hit | B's p90 TTFT |",
              "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for seed in seeds:
        for label, run in d["seeds"][seed].items():
            for p, r in run["a"].items():
                b = (run["b"] or {}).get(p)
                bcells = f"{100 * b['hit_rate']:.1f} | {b['ttft_p90_s']:.2f}" if b else " | "
                wait = "" if r.get("wait_max_s") is None else f"{r['wait_max_s']:.1f}"
                lines.append(f"| {seed} | {label} | {p} | {100 * r['hit_rate']:.1f} | {r['ttft_p90_s']:.2f} | {wait} | {bcells} |")
    lines.append("\nThe traces are built by `two_tenant_trace` in this script (workflow ids prefixed by tenant; "
                 f"pbkv-lae trains on a separate two-tenant trace, seed {TRAIN_SEED}); commands for seed "
                 f"{seeds[0]} (the others differ only in the trace names): "
                 + "; ".join(f"`{r['command']}`" for r in first.values()) + "\n")
    return "\n".join(lines)


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
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
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
    parts = [f"Built by `python benchmarks/schedulers.py` (preset {PRESET}, full KV memory, seed 0, Poisson "
             f"arrivals; every run holds back the first 25% of workflows for training).\n"]
    for w, d in doc.get("workloads", {}).items():
        parts.append(table_md(w, d, doc["slo_p90_ttft_s"]))
    if "tenants" in doc:
        parts.append(tenants_md(doc["tenants"]))
    write("schedulers", "\n".join(parts))


if __name__ == "__main__":
    main()

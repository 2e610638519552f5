"""The two-tenant part of benchmarks/schedulers.py: tenant A alone, alone with half the GPU pool
(its equal share), and beside a tenant B arriving at several times A's rate, under fcfs and
`fair`, over five trace seeds; and its tables.

A's calls are the same in every run of a seed (PBKV-LAE trains on a separate two-tenant trace),
so A's figures compare run against run."""

from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path

from benchmarks.sched_runs import PRESET, WORKFLOWS, bench, sustainable_rate


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


def spread(xs: list[float], fmt: str = "{:.2f}x") -> str:
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
            hit = spread([r["a"][p]["hit_rate"] / a["hit_rate"] for r, a in zip(rows, alone)])
            p90 = spread([r["a"][p]["ttft_p90_s"] / a["ttft_p90_s"] for r, a in zip(rows, alone)])
            vs_half = "| "
            if label.startswith("with B") and all(halfp):
                vs_half = (spread([r["a"][p]["hit_rate"] / h["hit_rate"] for r, h in zip(rows, halfp)]) + " | "
                           + spread([r["a"][p]["ttft_p90_s"] / h["ttft_p90_s"] for r, h in zip(rows, halfp)]))
            b = spread([r["b"][p]["ttft_p90_s"] for r in rows], "{:.2f}") if rows[0]["b"] else ""
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
    lines.append("\nThe traces are built by `two_tenant_trace` in sched_tenants.py (workflow ids prefixed by tenant; "
                 f"pbkv-lae trains on a separate two-tenant trace, seed {TRAIN_SEED}); commands for seed "
                 f"{seeds[0]} (the others differ only in the trace names): "
                 + "; ".join(f"`{r['command']}`" for r in first.values()) + "\n")
    return "\n".join(lines)

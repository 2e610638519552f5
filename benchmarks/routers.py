"""Routers across 2-16 simulated replicas at equal offered load per replica, and route() cost.

    python -m benchmarks.routers            # full: 2, 4, 8, 16 replicas (about 20 min on one core)
    python -m benchmarks.routers --quick    # 2 and 4 replicas (a few minutes)
    python -m benchmarks.routers --part micro
    python -m benchmarks.routers --part bounds   # eviction on each router's placement (4, 8 replicas)
    python -m benchmarks.routers --part pooled   # add the pooled-memory reference to that JSON
    python -m benchmarks.routers --results-table docs/results/routers.json   # its tables as markdown

Every replica is the simulator's engine model with the same settings: Llama-3.1-8B on H100
(`llama3.1-8b-h100`), a quarter of its KV memory (6,430 blocks of 16 tokens: the project's
memory-pressure setting), LRU eviction, FCFS admission, seed 0. Offered load per replica is
the same at every N:
- generated multi-agent workloads: closed loop with `CONC` workflows in flight per replica and
  `WORKFLOWS[workload]` workflows per replica (the generated trace has N x as many);
- Mooncake (one call per request, no identity; read in place from ../shared/traces if present):
  the first `MOONCAKE_PER` x N requests of the conversation trace at their timestamps x 4/N
  (`time_scale`), the preset's full KV memory (804 blocks of 512 tokens). Its prompts average
  12k tokens: at a quarter memory a replica holds 8 of them and queues for minutes at any rate,
  and at half the trace's rate per replica it is still overloaded (TTFT p50 40 s); a quarter of
  the trace's rate per replica is a loaded but stable point.
Each row: token hit rate, TTFT and E2E p50/p99, load imbalance (max / mean busy time over the
replicas). The microbenchmark times `route()` of every router at 16 replicas with 10,000 live
workflows in its state, over replica views that answer prefix lookups from a hash set.
The `bounds` part asks how much of the gap to the ceiling eviction can close on a router's
placement: per workload and replica count, for `prefix` and `agent`, LRU and PBKV-TA (its
predictor trained on a separate trace of the same workload, seed 1), each beside the cluster
oracle on its own placement (`agentrt.cluster.bounds`: clairvoyant eviction on every replica,
calls pinned where the router sent them in that run), and the pooled-memory reference: one
engine with N x a replica's compute, KV memory and batch limits under LRU and the oracle (the
cluster's memory as one pool, as if KV moved freely between replicas). Writes docs/results/routers.json (`--part bounds`:
docs/results/router_bounds.json). The shared settings and helpers are in router_setup.py, the
bounds and pooled parts in router_bounds.py.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import sys
import time
from pathlib import Path

from agentrt.bench.source import workload_source
from agentrt.cluster.registry import make_router, router_names
from agentrt.cluster.routing import ClusterHints, RouteRequest
from agentrt.cluster.run import render, run_cluster
from agentrt.trace.reader import TraceReader
from agentrt.workloads.base import GenConfig
from benchmarks.router_bounds import bounds_main, pooled_main, write_docs
from benchmarks.router_setup import (CONC, GPU_TOKENS, MOONCAKE, MOONCAKE_GPU_TOKENS, MOONCAKE_PER, MOONCAKE_STRETCH,
                                     PRESET, REPO, WORKFLOWS, ceiling, config, row)


def run_workload(name: str, n: int, scale: float, routers: list[str]) -> tuple[dict, str, float]:
    per = max(4, int(WORKFLOWS[name] * scale))
    src = workload_source(name, GenConfig(workflows=per * n, seed=0, concurrency=CONC * n))
    cfg = config(src.header.block_size)
    res = {}
    for r in routers:
        res[r] = run_cluster(src.eval_calls(), n, r, cfg, concurrency=CONC * n, seed=0)
    cap = ceiling(src.eval_calls(), src.header.block_size)
    src.close()
    title = (f"{name}: {n} replicas, {per * n} workflows, {CONC * n} in flight, {src.calls} calls; "
             f"unbounded-cache ceiling {cap:.1%}")
    return res, title, cap


def run_mooncake(n: int, scale: float, routers: list[str]) -> tuple[dict, str, float] | None:
    if not MOONCAKE.exists():
        print(f"skipping Mooncake: {MOONCAKE} not found", flush=True)
        return None
    k = max(20, int(MOONCAKE_PER * scale)) * n
    reader = TraceReader(MOONCAKE)
    cfg = config(reader.header.block_size, MOONCAKE_GPU_TOKENS)
    res = {}
    for r in routers:
        calls = itertools.islice(iter(TraceReader(MOONCAKE)), k)
        res[r] = run_cluster(calls, n, r, cfg, time_scale=MOONCAKE_STRETCH / n, seed=0)
    cap = ceiling(itertools.islice(iter(TraceReader(MOONCAKE)), k), reader.header.block_size)
    return (res, f"mooncake: {n} replicas, first {k} requests, timestamps x {MOONCAKE_STRETCH / n:g}; "
                 f"unbounded-cache ceiling {cap:.1%}", cap)


# ---------------------------------------------------------------------------------- micro
class _SetView:
    """A replica as a KV-event mirror would hold it: resident hash ids in a set (a cached
    prefix is contiguous, so the longest one is found by bisection), and its load."""

    __slots__ = ("ids", "running", "waiting", "queued_tokens", "free_blocks", "capacity_blocks",
                 "evicted_blocks")

    def __init__(self, rng: random.Random) -> None:
        self.ids: set[int] = set()
        self.running = rng.randint(0, 32)
        self.waiting = rng.randint(0, 8)
        self.queued_tokens = rng.randint(0, 40_000)
        self.capacity_blocks = 6430
        self.free_blocks = 100
        self.evicted_blocks = 0

    def cached_blocks(self, tenant: str, hash_ids) -> int:
        lo, hi = 0, len(hash_ids)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if hash_ids[mid - 1] in self.ids:
                lo = mid
            else:
                hi = mid - 1
        return lo


def micro(n_replicas: int = 16, live: int = 10_000, decisions: int = 10_000, blocks: int = 256) -> dict:
    """Seconds per route() at `n_replicas` replicas with `live` workflows in the router's state."""
    rng = random.Random(0)
    views = [_SetView(rng) for _ in range(n_replicas)]
    agents = [f"agent{i}" for i in range(16)]
    anchors = {a: [i * 1000 + j for j in range(64)] for i, a in enumerate(agents)}
    reqs = []
    for w in range(live):
        a = agents[w % len(agents)]
        chain = anchors[a] + [10**6 + w * 1000 + j for j in range(blocks - 64)]
        reqs.append(RouteRequest(tenant="default", workflow=f"wf{w}", agent=a, hash_ids=chain,
                                 prompt_tokens=blocks * 16, output_tokens=200))
    out = {}
    for name in router_names():
        router = make_router(name)
        router.bind(ClusterHints(block_size=16))
        for v in views:
            v.ids.clear()
        now = 0.0
        for q in reqs:       # fill its state: every workflow live, one call done and cached where it ran
            i = router.route(q, views, now)
            router.on_routed(q, i, now)
            router.on_finished(q, i, now)
            views[i].ids.update(q.hash_ids[: rng.randint(64, blocks)])
            now += 1e-3
        sample = [reqs[rng.randrange(live)] for _ in range(decisions)]
        row = {"state": router.state_size()}
        for label in ("random", "equal"):      # random loads (imbalance guards fire), equal loads
            saved = [(v.running, v.waiting, v.queued_tokens) for v in views]
            if label == "equal":
                for v in views:
                    v.running, v.waiting, v.queued_tokens = 16, 2, 20_000
            t0 = time.perf_counter()
            for q in sample:
                router.route(q, views, now)
            row[f"route_us_{label}_loads"] = (time.perf_counter() - t0) / decisions * 1e6
            for v, (r, w, q) in zip(views, saved):
                v.running, v.waiting, v.queued_tokens = r, w, q
        out[name] = row
        print(f"  {name:14s} {row['route_us_random_loads']:7.1f} us per route() (random loads), "
              f"{row['route_us_equal_loads']:7.1f} us (equal loads); state entries {row['state']}", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.routers", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="2 and 4 replicas only")
    ap.add_argument("--part", choices=["all", "sim", "micro", "bounds", "pooled"], default="all")
    ap.add_argument("--replicas", default=None, help="comma-separated replica counts")
    ap.add_argument("--workloads", default=",".join([*WORKFLOWS, "mooncake"]))
    ap.add_argument("--routers", default=None, help="comma-separated (default: every router; "
                    "prefix,agent with --part bounds)")
    ap.add_argument("--out", default=None, help="JSON output (default: docs/results/routers.json, "
                    "or router_bounds.json with --part bounds)")
    ap.add_argument("--docs", action="store_true", help="--part bounds: write the table into docs/routers.md")
    ap.add_argument("--docs-only", default=None, metavar="JSON",
                    help="rebuild docs/routers.md's bounds table from this JSON and exit")
    ap.add_argument("--results-table", default=None, metavar="JSON",
                    help="print the results tables (sim and micro parts) of this JSON as markdown and exit")
    a = ap.parse_args()
    if a.results_table:
        return print(results_markdown(json.loads(Path(a.results_table).read_text())))
    if a.docs_only:
        return write_docs(json.loads(Path(a.docs_only).read_text()), REPO / "docs" / "routers.md")
    if a.part == "bounds":
        return bounds_main(a)
    if a.part == "pooled":
        return pooled_main(a)
    ns = [int(x) for x in a.replicas.split(",")] if a.replicas else ([2, 4] if a.quick else [2, 4, 8, 16])
    scale = 1.0
    routers = a.routers.split(",") if a.routers is not None else router_names()
    doc: dict = {"settings": {"preset": PRESET, "gpu_tokens_per_replica": GPU_TOKENS, "conc_per_replica": CONC,
                              "workflows_per_replica": {k: max(4, int(v * scale)) for k, v in WORKFLOWS.items()},
                              "mooncake_per_replica": max(20, int(MOONCAKE_PER * scale)),
                              "mooncake_gpu_tokens_per_replica": MOONCAKE_GPU_TOKENS,
                              "mooncake_time_scale": f"{MOONCAKE_STRETCH:g}/N",
                              "policy": "lru", "scheduler": "fcfs", "quick": a.quick,
                              "command": "python -m benchmarks.routers" + (" --quick" if a.quick else "")},
                 "runs": []}
    t_all = time.time()
    if a.part in ("all", "sim"):
        for wl in a.workloads.split(","):
            for n in ns:
                t0 = time.time()
                got = run_mooncake(n, scale, routers) if wl == "mooncake" else run_workload(wl, n, scale, routers)
                if got is None:
                    break
                res, title, cap = got
                print(render(res, title), flush=True)
                print(f"  ({time.time() - t0:.0f} s)\n", flush=True)
                doc["runs"].append({"workload": wl, "replicas": n, "title": title, "ceiling_hit_rate": cap,
                                    "results": {r: row(cm) for r, cm in res.items()}})
    if a.part in ("all", "micro"):
        print("route() cost, 16 replicas, 10,000 live workflows:", flush=True)
        doc["micro"] = micro()
    doc["seconds"] = time.time() - t_all
    out = Path(a.out or REPO / "docs" / "results" / "routers.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1))
    print(f"wrote {out} ({doc['seconds']:.0f} s)")


def results_markdown(doc: dict) -> str:
    """The sim and micro parts as the two markdown tables docs/routers.md and docs/notes/results-details.md show."""
    names = router_names()
    lines = ["| workload | N | ceiling | " + " | ".join(names) + " | agent/prefix | TTFT p99 prefix / agent (s) | "
             "imbalance prefix / agent |", "|" + "---|" * (len(names) + 6)]
    for run in doc["runs"]:
        r = run["results"]
        cells = [run["workload"], str(run["replicas"]), f"{100 * run['ceiling_hit_rate']:.1f}"]
        cells += [f"{100 * r[n]['hit_rate']:.1f}" for n in names]
        pa = r["prefix"], r["agent"]
        cells += [f"{pa[1]['hit_rate'] / pa[0]['hit_rate']:.2f}",
                  f"{pa[0]['ttft_p99_s']:.2f} / {pa[1]['ttft_p99_s']:.2f}",
                  f"{pa[0]['imbalance']:.2f} / {pa[1]['imbalance']:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    if "micro" in doc:
        lines += ["", "| router | route() us, random loads | route() us, equal loads | state entries |",
                  "|---|---|---|---|"]
        for n, m in doc["micro"].items():
            lines.append(f"| {n} | {m['route_us_random_loads']:.1f} | {m['route_us_equal_loads']:.1f} | {m['state']} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())

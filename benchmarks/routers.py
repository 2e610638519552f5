"""Routers across 2-16 simulated replicas at equal offered load per replica, and route() cost.

    python benchmarks/routers.py            # full: 2, 4, 8, 16 replicas (about 20 min on one core)
    python benchmarks/routers.py --quick    # 2 and 4 replicas (a few minutes)
    python benchmarks/routers.py --part micro
    python benchmarks/routers.py --part bounds   # eviction on each router's placement (4, 8 replicas)
    python benchmarks/routers.py --part pooled   # add the pooled-memory reference to that JSON
    python benchmarks/routers.py --results-table docs/results/routers.json   # its tables as markdown

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
docs/results/router_bounds.json).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import random
import sys
import time
from pathlib import Path

from agentrt.bench.source import workload_source
from agentrt.cluster.bounds import run_cluster_oracle
from agentrt.cluster.registry import make_router, router_names
from agentrt.cluster.routing import ClusterHints, RouteRequest
from agentrt.cluster.run import render, run_cluster
from agentrt.engine.presets import get_preset
from agentrt.engine.simulator import EngineConfig, Simulator
from agentrt.policies.oracle import FutureUses, OraclePolicy, best_of_passes
from agentrt.policies.registry import make_policy
from agentrt.sched.registry import make_scheduler
from agentrt.trace.reader import TraceReader
from agentrt.workloads.base import GenConfig

REPO = Path(__file__).resolve().parents[1]
MOONCAKE = REPO.parent / "shared" / "traces" / "mooncake" / "conversation_trace.jsonl"
PRESET = "llama3.1-8b-h100"
GPU_TOKENS = 6430 * 16
CONC = 16
WORKFLOWS = {"team": 48, "hover": 40, "swebench": 40, "gaia": 32, "mix": 48}
MOONCAKE_PER = 300
MOONCAKE_STRETCH = 4.0     # each replica gets a quarter of the trace's rate (see the docstring)
MOONCAKE_GPU_TOKENS = 25720 * 16


def config(block_size: int, tokens: int = GPU_TOKENS) -> EngineConfig:
    return EngineConfig(get_preset(PRESET), block_size, gpu_blocks=tokens // block_size)


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


def trained(policy: str, workload: str, n: int, per: int, block_size: int):
    """A factory of `policy` instances sharing one predictor trained on a separate trace (seed 1)."""
    src = workload_source(workload, GenConfig(workflows=per * n, seed=1, concurrency=CONC * n))
    first = make_policy(policy, seed=0)
    first.train(src.eval_calls(), block_size)
    src.close()
    made = [first]

    def factory():
        if made:
            return made.pop()
        p = make_policy(policy, seed=0)
        p.use_predictor(first.predictor)
        return p
    return factory


def pooled_config(block_size: int, n: int) -> EngineConfig:
    """One engine with n x one replica's compute (peak FLOPs, HBM bandwidth), KV memory and batch
    limits: the cluster's memory as one pool."""
    p = get_preset(PRESET)
    gpu = dataclasses.replace(p.gpu, peak_flops=p.gpu.peak_flops * n, hbm_bytes_s=p.gpu.hbm_bytes_s * n)
    pooled = dataclasses.replace(p, name=f"{p.name} x{n}", gpu=gpu)
    return EngineConfig(pooled, block_size, gpu_blocks=GPU_TOKENS // block_size * n,
                        max_batch_tokens=8192 * n, max_running=256 * n)


def run_pooled(calls: list, n: int, block_size: int, passes: int = 3) -> dict:
    """LRU and the oracle on the pooled engine (`pooled_config`), as `agentrt bench` runs them
    on one replica (the oracle's first reference order is LRU's, the best pass kept)."""
    cfg = pooled_config(block_size, n)
    keys = ("hit_rate", "ttft_p50_s", "ttft_p99_s")
    sim = Simulator(cfg, make_policy("lru"), iter(calls), concurrency=CONC * n, record_stream=True)
    sim.run()
    s = sim.metrics.summary()
    out = {"lru": {k: s[k] for k in keys}}

    def replay(order, i: int):
        o = Simulator(cfg, OraclePolicy(FutureUses(calls, order, block_size)), iter(calls),
                      concurrency=CONC * n, record_stream=True)
        o.run()
        s = o.metrics.summary()
        return o.metrics.gpu_hit_tokens, {k: s[k] for k in keys}, o.admitted
    best, done = best_of_passes(sim.admitted, passes, replay)
    out["oracle"] = dict(best, passes=done)
    return out


def add_pooled(run: dict) -> None:
    """Add the pooled-memory reference to one run of the bounds part (same trace)."""
    n, name = run["replicas"], run["workload"]
    calls, bs = trace(name, n)
    run["pooled"] = run_pooled(calls, n, bs)
    print(f"  {name} N={n} pooled: lru {run['pooled']['lru']['hit_rate']:.1%}  "
          f"oracle {run['pooled']['oracle']['hit_rate']:.1%}", flush=True)


def trace(name: str, n: int) -> tuple[list, int]:
    """The generated trace of the bounds part for `n` replicas: (calls, block size)."""
    src = workload_source(name, GenConfig(workflows=WORKFLOWS[name] * n, seed=0, concurrency=CONC * n))
    calls = list(src.eval_calls())
    src.close()
    return calls, src.header.block_size


def run_bounds(name: str, n: int, routers: list[str], learned: str = "pbkv-ta") -> dict:
    """Behind each router: LRU and `learned`, each with the cluster oracle on its own placement."""
    per = WORKFLOWS[name]
    calls, bs = trace(name, n)
    cfg = config(bs)
    out = {"workload": name, "replicas": n, "workflows": per * n, "calls": len(calls),
           "ceiling_hit_rate": ceiling(calls, bs), "routers": {}}
    learn = trained(learned, name, n, per, bs)
    for r in routers:
        res = out["routers"][r] = {}
        for pol, factory in (("lru", lambda: make_policy("lru")), (learned, learn)):
            got = run_cluster_oracle(calls, n, r, cfg, lambda: make_scheduler("fcfs"), reference=factory,
                                     concurrency=CONC * n, passes=3)
            res[pol] = row(got.reference)
            res[f"oracle on {pol}'s placement"] = dict(row(got.bound), passes=got.passes)
        print(f"  {name} N={n} {r:8s} " + "  ".join(f"{k} {v['hit_rate']:.1%}" for k, v in res.items()),
              flush=True)
    add_pooled(out)
    return out


def ceiling(calls, block_size: int) -> float:
    """Token hit rate with one unbounded cache and no timing: each call hits the longest prefix
    of its prompt that any earlier call in the file computed (prompt or output blocks). No
    router over any number of replicas can beat it."""
    seen: set[tuple[str, int]] = set()
    hit = total = 0
    for c in calls:
        n = c.input_length // block_size
        k = 0
        while k < n and (c.tenant, c.hash_ids[k]) in seen:
            k += 1
        hit += min(k * block_size, max(c.input_length - 1, 0))
        total += c.input_length
        seen.update((c.tenant, h) for h in c.hash_ids[:n])
        seen.update((c.tenant, h) for h in c.output_hash_ids)
    return hit / total if total else 0.0


def row(cm) -> dict:
    s = cm.summary()
    keep = ("hit_rate", "ttft_p50_s", "ttft_p99_s", "e2e_p50_s", "e2e_p99_s", "imbalance", "calls",
            "workflows", "router_state", "makespan_s", "replicas", "wall_s")
    return {k: s[k] for k in keep if k in s}


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
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
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
                              "command": "python benchmarks/routers.py" + (" --quick" if a.quick else "")},
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


BOUNDS_START, BOUNDS_END = "<!-- router-bounds:start -->", "<!-- router-bounds:end -->"


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


def bounds_markdown(doc: dict) -> str:
    """The bounds part as a markdown table (what docs/routers.md shows between its markers)."""
    routers = list(doc["runs"][0]["routers"]) if doc["runs"] else []
    head = ["workload", "N", "ceiling"]
    for r in routers:
        head += [f"{r}: lru", f"{r}: oracle on lru's", f"{r}: pbkv-ta", f"{r}: oracle on pbkv-ta's"]
    pooled = all("pooled" in run for run in doc["runs"])
    if pooled:
        head += ["pooled: lru", "pooled: oracle"]
    head += ["best / prefix+lru", "best / its oracle"] + (["pooled oracle / prefix+lru"] if pooled else [])
    lines = [f"Built by `{doc['settings']['command']}` (docs/results/router_bounds.json, "
             f"{doc['seconds']:.0f} s). GPU token hit %; \"oracle on X's\": the cluster oracle on the "
             "placement of the X run; best = the highest of the online runs (router + eviction); "
             "pooled = one engine with N x a replica's compute and memory (the memory as one pool).", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for run in doc["runs"]:
        cells = [run["workload"], str(run["replicas"]), f"{100 * run['ceiling_hit_rate']:.1f}"]
        best, best_key = -1.0, None
        for r in routers:
            res = run["routers"][r]
            for k in ("lru", "oracle on lru's placement", "pbkv-ta", "oracle on pbkv-ta's placement"):
                cells.append(f"{100 * res[k]['hit_rate']:.1f}")
            for k in ("lru", "pbkv-ta"):
                if res[k]["hit_rate"] > best:
                    best, best_key = res[k]["hit_rate"], (r, k)
        base = run["routers"]["prefix"]["lru"]["hit_rate"] if "prefix" in run["routers"] else None
        own = run["routers"][best_key[0]][f"oracle on {best_key[1]}'s placement"]["hit_rate"]
        if pooled:
            cells += [f"{100 * run['pooled'][k]['hit_rate']:.1f}" for k in ("lru", "oracle")]
        cells.append(f"{best / base:.2f} ({best_key[0]}+{best_key[1]})" if base else "-")
        cells.append(f"{best / own:.3f}")
        if pooled:
            cells.append(f"{run['pooled']['oracle']['hit_rate'] / base:.2f}" if base else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_between(path: Path, start: str, end: str, body: str) -> None:
    """Replace what lies between two marker lines of a docs file."""
    text = path.read_text()
    a, b = text.index(start) + len(start), text.index(end)
    path.write_text(text[:a] + "\n" + body + "\n" + text[b:])
    print(f"updated {path}")


def write_docs(doc: dict, path: Path) -> None:
    write_between(path, BOUNDS_START, BOUNDS_END, bounds_markdown(doc))


def bounds_main(a) -> None:
    ns = [int(x) for x in a.replicas.split(",")] if a.replicas else [4, 8]
    wls = [w for w in a.workloads.split(",") if w in WORKFLOWS]
    routers = a.routers.split(",") if a.routers is not None else ["prefix", "agent"]
    t_all = time.time()
    doc = {"settings": {"preset": PRESET, "gpu_tokens_per_replica": GPU_TOKENS, "conc_per_replica": CONC,
                        "workflows_per_replica": {w: WORKFLOWS[w] for w in wls}, "scheduler": "fcfs",
                        "command": "python benchmarks/routers.py --part bounds"}, "runs": []}
    for wl in wls:
        for n in ns:
            t0 = time.time()
            doc["runs"].append(run_bounds(wl, n, routers))
            print(f"  ({time.time() - t0:.0f} s)", flush=True)
    doc["seconds"] = time.time() - t_all
    out = Path(a.out or REPO / "docs" / "results" / "router_bounds.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1))
    print(f"wrote {out} ({doc['seconds']:.0f} s)")
    print(bounds_markdown(doc))
    if a.docs:
        write_docs(doc, REPO / "docs" / "routers.md")


def pooled_main(a) -> None:
    """Add the pooled reference to an existing bounds JSON (what `--part bounds` computes too)."""
    path = Path(a.out or REPO / "docs" / "results" / "router_bounds.json")
    doc = json.loads(path.read_text())
    t0 = time.time()
    for run in doc["runs"]:
        add_pooled(run)
    doc["seconds_pooled"] = time.time() - t0
    path.write_text(json.dumps(doc, indent=1))
    print(bounds_markdown(doc))
    if a.docs:
        write_docs(doc, REPO / "docs" / "routers.md")


if __name__ == "__main__":
    sys.exit(main())

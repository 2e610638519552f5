"""The `bounds` and `pooled` parts of benchmarks/routers.py: how much of the gap to the ceiling
eviction can close on a router's placement. Per workload and replica count, for each router, LRU
and PBKV-TA (its predictor trained on a separate trace, seed 1), each beside the cluster oracle
on its own placement, and the pooled-memory reference (one engine with N x a replica's compute,
KV memory and batch limits under LRU and the oracle). Writes docs/results/router_bounds.json and
the table between the `router-bounds` markers of docs/routers.md."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

from agentrt.cluster.bounds import run_cluster_oracle
from agentrt.engine.presets import get_preset
from agentrt.engine.simulator import EngineConfig, Simulator
from agentrt.policies.oracle import FutureUses, OraclePolicy, best_of_passes
from agentrt.policies.registry import make_policy
from agentrt.sched.registry import make_scheduler
from benchmarks.router_setup import (CONC, GPU_TOKENS, PRESET, REPO, WORKFLOWS, ceiling, config, row, trace, trained,
                                     write_between)

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


BOUNDS_START, BOUNDS_END = "<!-- router-bounds:start -->", "<!-- router-bounds:end -->"


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


def write_docs(doc: dict, path: Path) -> None:
    write_between(path, BOUNDS_START, BOUNDS_END, bounds_markdown(doc))


def bounds_main(a) -> None:
    ns = [int(x) for x in a.replicas.split(",")] if a.replicas else [4, 8]
    wls = [w for w in a.workloads.split(",") if w in WORKFLOWS]
    routers = a.routers.split(",") if a.routers is not None else ["prefix", "agent"]
    t_all = time.time()
    doc = {"settings": {"preset": PRESET, "gpu_tokens_per_replica": GPU_TOKENS, "conc_per_replica": CONC,
                        "workflows_per_replica": {w: WORKFLOWS[w] for w in wls}, "scheduler": "fcfs",
                        "command": "python -m benchmarks.routers --part bounds"}, "runs": []}
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

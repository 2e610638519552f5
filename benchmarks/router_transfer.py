"""Peer KV transfer across replicas: how much of the pooled-memory reference it recovers, per router.

    python -m benchmarks.router_transfer                   # 4 and 8 replicas, five workloads and Mooncake (~20 min)
    python -m benchmarks.router_transfer --docs            # also write the table into docs/routers.md
    python -m benchmarks.router_transfer --docs-only JSON  # rebuild that table from a JSON
    python -m benchmarks.router_transfer --add-oracle      # add the oracle reference to the JSON (~18 min)
    python -m benchmarks.router_transfer --gbps 5 --out X.json   # another link speed

Same settings as `python -m benchmarks.routers --part bounds` (its `config`, `WORKFLOWS`, `CONC`: Llama-3.1-8B
on H100, 6,430 blocks of 16 tokens per replica, 16 workflows in flight per replica, FCFS, seed
0), and the same traces. Per workload and replica count: `prefix`, `agent` and `least-loaded`
under LRU, without and with peer transfer (`agentrt.cluster.transfer`, `--gbps`, 25 GB/s received per
replica: a 400 Gb/s RDMA NIC per GPU at half its line rate), and PBKV-TA (predictor trained on a
seed-1 trace, as in the bounds part) behind `prefix` and `agent` with transfer. The pooled-memory
reference (one engine with N x a replica's compute and memory, LRU and the oracle) is read from
docs/results/router_bounds.json when that file was built on the same settings. Mooncake's
conversation trace (read in place from ../shared/traces, skipped if absent) is replayed as
routers.py replays it (the first 300 x N requests at timestamps x 4/N, the preset's full memory),
LRU rows only: it has no workflows for PBKV-TA to learn from.

`--add-oracle` adds, per generated workload, clairvoyant eviction with transfer on the placement
of the `prefix` + PBKV-TA run (`cluster.bounds.oracle_on_placement` with `transfer_gbps`; up to
three passes, the best kept): each replica's oracle sees only the calls pinned to it, so keeping
a block for a peer's fetch is invisible to it. A reference, not a bound.

Reported: prefill saved = 1 - computed prompt tokens / prompt tokens (GPU, host and peer hits
together: what transfer changes is where a hit comes from), its peer share, and TTFT p99.
Writes docs/results/router_transfer.json.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

from agentrt.cluster.run import run_cluster
from agentrt.policies.registry import make_policy
from agentrt.trace.reader import TraceReader
from benchmarks.router_setup import (CONC, GPU_TOKENS, MOONCAKE, MOONCAKE_GPU_TOKENS, MOONCAKE_PER, MOONCAKE_STRETCH,
                                     PRESET, REPO, WORKFLOWS, config, trace, trained, write_between)

DEFAULT_GBPS = 25.0
ROUTERS = ["prefix", "agent", "least-loaded"]
LEARNED = "pbkv-ta"
START, END = "<!-- router-transfer:start -->", "<!-- router-transfer:end -->"


def figures(cm) -> dict:
    s = cm.summary()
    return {"saved": 1.0 - s["prefill_tokens"] / (s["prompt_tokens"] or 1), "hit_rate": s["hit_rate"],
            "remote_hit_rate": s["remote_hit_rate"], "ttft_p50_s": s["ttft_p50_s"],
            "ttft_p99_s": s["ttft_p99_s"], "e2e_p50_s": s["e2e_p50_s"], "imbalance": s["imbalance"],
            "net_bytes": s["net_bytes"]}


def lru_rows(out: dict, calls: list, n: int, routers: list[str], cfg, gbps: float, **replay) -> None:
    for r in routers:
        for link in (None, gbps):
            cm = run_cluster(iter(calls), n, r, cfg, seed=0, transfer_gbps=link,
                             policy_factory=lambda: make_policy("lru"), **replay)
            out["runs"][f"{r} lru" + (" +T" if link else "")] = figures(cm)


def run_mooncake(n: int, routers: list[str], gbps: float) -> dict | None:
    """Mooncake's conversation trace as routers.py replays it (no identity, one call per request):
    LRU rows only (PBKV-TA's predictor learns from workflows, which this trace does not have)."""
    if not MOONCAKE.exists():
        print(f"skipping Mooncake: {MOONCAKE} not found", flush=True)
        return None
    reader = TraceReader(MOONCAKE)
    calls = list(itertools.islice(iter(reader), MOONCAKE_PER * n))
    out = {"workload": "mooncake", "replicas": n, "calls": len(calls), "runs": {}}
    lru_rows(out, calls, n, routers, config(reader.header.block_size, MOONCAKE_GPU_TOKENS), gbps,
             time_scale=MOONCAKE_STRETCH / n)
    print(f"  mooncake N={n} " + "  ".join(f"{k} {v['saved']:.1%}" for k, v in out["runs"].items()), flush=True)
    return out


def run_one(name: str, n: int, routers: list[str], gbps: float) -> dict | None:
    if name == "mooncake":
        return run_mooncake(n, routers, gbps)
    calls, bs = trace(name, n)
    cfg = config(bs)
    out = {"workload": name, "replicas": n, "calls": len(calls), "runs": {}}
    lru_rows(out, calls, n, routers, cfg, gbps, concurrency=CONC * n)
    learn = None
    for r in routers:
        if r == "least-loaded":
            continue
        learn = learn or trained(LEARNED, name, n, WORKFLOWS[name], bs)
        cm = run_cluster(iter(calls), n, r, cfg, concurrency=CONC * n, seed=0, transfer_gbps=gbps,
                         policy_factory=learn)
        out["runs"][f"{r} {LEARNED} +T"] = figures(cm)
    print(f"  {name} N={n} " + "  ".join(f"{k} {v['saved']:.1%}" for k, v in out["runs"].items()), flush=True)
    return out


ORACLE = f"oracle +T (prefix {LEARNED}'s placement)"


def add_oracle(run: dict, gbps: float) -> None:
    """The oracle reference on the placement of `prefix` + PBKV-TA with transfer (its reference
    run is that row again, recomputed: the two must agree)."""
    from agentrt.cluster.bounds import run_cluster_oracle
    from agentrt.sched.registry import make_scheduler
    name, n = run["workload"], run["replicas"]
    calls, bs = trace(name, n)
    got = run_cluster_oracle(calls, n, "prefix", config(bs), lambda: make_scheduler("fcfs"),
                             reference=trained(LEARNED, name, n, WORKFLOWS[name], bs),
                             concurrency=CONC * n, passes=3, transfer_gbps=gbps)
    ref = figures(got.reference)
    row = run["runs"][f"prefix {LEARNED} +T"]
    if abs(ref["saved"] - row["saved"]) > 1e-9:
        raise SystemExit(f"{name} N={n}: the reference run ({ref['saved']:.4f}) differs from the "
                         f"table's prefix {LEARNED} +T row ({row['saved']:.4f}): rebuild the JSON first")
    run["runs"][ORACLE] = dict(figures(got.bound), passes=got.passes)
    print(f"  {name} N={n} prefix {LEARNED} +T {row['saved']:.1%}  oracle +T {run['runs'][ORACLE]['saved']:.1%}"
          f" ({got.passes} passes)", flush=True)


def add_pooled(doc: dict, bounds_path: Path) -> None:
    """Pooled LRU and oracle hit rates from the bounds JSON, when its settings match."""
    if not bounds_path.exists():
        return
    b = json.loads(bounds_path.read_text())
    s = b.get("settings", {})
    if s.get("preset") != PRESET or s.get("gpu_tokens_per_replica") != GPU_TOKENS \
            or s.get("conc_per_replica") != CONC:
        return
    pooled = {(r["workload"], r["replicas"]): r["pooled"] for r in b.get("runs", []) if "pooled" in r}
    for run in doc["runs"]:
        p = pooled.get((run["workload"], run["replicas"]))
        if p is not None and WORKFLOWS.get(run["workload"]) == s["workflows_per_replica"].get(run["workload"]):
            run["pooled"] = {k: p[k]["hit_rate"] for k in ("lru", "oracle")}


def markdown(doc: dict) -> str:
    keys = max((list(r["runs"]) for r in doc["runs"]), key=len, default=[])
    pooled = any("pooled" in r for r in doc["runs"])
    oracle = any(ORACLE in r["runs"] for r in doc["runs"])
    if ORACLE in keys:
        keys.remove(ORACLE)
    head = ["workload", "N", *keys] + ([ORACLE] if oracle else []) \
        + (["pooled: lru", "pooled: oracle"] if pooled else []) \
        + ["best +T / prefix lru"] + (["best +T / oracle +T"] if oracle else []) \
        + ["TTFT p99 s: prefix lru / best +T"]
    extra = (f"; the oracle column by `{doc['settings']['command']} --add-oracle`, "
             f"{doc['seconds_oracle']:.0f} s") if oracle and "seconds_oracle" in doc else ""
    if "seconds_16" in doc:      # rows added by a separate run (merged into the same JSON)
        extra += f"; the 16-replica rows by `{doc['settings']['command']} --replicas 16`, {doc['seconds_16']:.0f} s"
    if "mooncake_rerun" in doc:  # rows re-run after a change that touched only them, spliced in
        extra += f"; {doc['mooncake_rerun']}"
    lines = [f"Built by `{doc['settings']['command']}` (docs/results/router_transfer.json, "
             f"{doc['seconds']:.0f} s{extra}). Prefill saved % (GPU + peer hits; peer share in brackets); "
             f"+T: peer transfer at {doc['settings']['gbps']:g} GB/s; pooled: one engine with N x a "
             "replica's compute and memory, GPU hit % (from docs/results/router_bounds.json).", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for run in doc["runs"]:
        res = run["runs"]
        cells = [run["workload"], str(run["replicas"])]
        for k in keys:
            v = res.get(k)
            if v is None:
                cells.append("-")
                continue
            cells.append(f"{100 * v['saved']:.1f}" + (f" ({100 * v['remote_hit_rate']:.1f})" if k.endswith("+T") else ""))
        if oracle:
            cells.append(f"{100 * res[ORACLE]['saved']:.1f}" if ORACLE in res else "-")
        if pooled:
            cells += [f"{100 * run['pooled'][k]:.1f}" if "pooled" in run else "-" for k in ("lru", "oracle")]
        best = max((k for k in res if k.endswith("+T")), key=lambda k: res[k]["saved"])
        base = res["prefix lru"]
        cells.append(f"{res[best]['saved'] / base['saved']:.2f} ({best[:-3]})")
        if oracle:
            cells.append(f"{res[best]['saved'] / res[ORACLE]['saved']:.3f}" if ORACLE in res else "-")
        cells.append(f"{base['ttft_p99_s']:.2f} / {res[best]['ttft_p99_s']:.2f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_docs(doc: dict, path: Path) -> None:
    write_between(path, START, END, markdown(doc))


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.router_transfer", description=__doc__.splitlines()[0])
    ap.add_argument("--replicas", default="4,8", help="comma-separated replica counts")
    ap.add_argument("--workloads", default=",".join([*WORKFLOWS, "mooncake"]))
    ap.add_argument("--out", default=None, help="JSON output (default docs/results/router_transfer.json)")
    ap.add_argument("--docs", action="store_true", help="write the table into docs/routers.md")
    ap.add_argument("--docs-only", default=None, metavar="JSON", help="rebuild the docs table from this JSON and exit")
    ap.add_argument("--gbps", type=float, default=DEFAULT_GBPS,
                    help=f"the link, GB/s per replica (default {DEFAULT_GBPS:g})")
    ap.add_argument("--add-oracle", action="store_true",
                    help="add the oracle reference to the JSON (--out or the default) for --workloads, then exit")
    a = ap.parse_args()
    if not a.gbps > 0:
        ap.error(f"--gbps must be > 0, got {a.gbps}")
    docs = REPO / "docs" / "routers.md"
    if a.docs_only:
        return write_docs(json.loads(Path(a.docs_only).read_text()), docs)
    if a.add_oracle:
        path = Path(a.out or REPO / "docs" / "results" / "router_transfer.json")
        doc = json.loads(path.read_text())
        t0 = time.time()
        for run in doc["runs"]:
            if run["workload"] in a.workloads.split(",") and run["workload"] in WORKFLOWS:
                add_oracle(run, doc["settings"]["gbps"])     # on the table's link
        doc["seconds_oracle"] = doc.get("seconds_oracle", 0.0) + time.time() - t0
        path.write_text(json.dumps(doc, indent=1))
        print(markdown(doc))
        if a.docs:
            write_docs(doc, docs)
        return None
    unknown = [w for w in a.workloads.split(",") if w not in WORKFLOWS and w != "mooncake"]
    if unknown:
        ap.error(f"unknown workloads {unknown}; choose from {', '.join(WORKFLOWS)}, mooncake")
    t0 = time.time()
    doc = {"settings": {"preset": PRESET, "gpu_tokens_per_replica": GPU_TOKENS, "conc_per_replica": CONC,
                        "workflows_per_replica": dict(WORKFLOWS), "gbps": a.gbps, "scheduler": "fcfs",
                        "mooncake_per_replica": MOONCAKE_PER, "mooncake_gpu_tokens_per_replica": MOONCAKE_GPU_TOKENS,
                        "mooncake_time_scale": f"{MOONCAKE_STRETCH:g}/N",
                        "command": " ".join(["python -m benchmarks.router_transfer", *sys.argv[1:]])},
           "runs": []}
    for wl in a.workloads.split(","):
        for n in (int(x) for x in a.replicas.split(",")):
            got = run_one(wl, n, ROUTERS, a.gbps)
            if got is None:
                break
            doc["runs"].append(got)
    doc["seconds"] = time.time() - t0
    add_pooled(doc, REPO / "docs" / "results" / "router_bounds.json")
    out = Path(a.out or REPO / "docs" / "results" / "router_transfer.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1))
    print(f"wrote {out} ({doc['seconds']:.0f} s)")
    print(markdown(doc))
    if a.docs:
        write_docs(doc, docs)


if __name__ == "__main__":
    sys.exit(main())

"""Workflow predictor benchmark: training time, held-out accuracy per step, inference latency.

For each workload and predictor kind (markov, graphsage, rgcn): generate the workload in memory,
hold out a seeded 20% of its workflows, train on the rest (timed, single process; neural kinds
use one torch thread), then report top-1 accuracy and log loss per horizon step on the held-out
workflows, and the wall time of `predict_batch` per active workflow for batches of 1, 16, 64 and
256 states drawn from the held-out workflows (median of repeats). Target: training on a default
workload in under five minutes on 2 CPU cores, inference under 1 ms per workflow batched.

    python -m benchmarks.predictor [--workloads mix,team] [--workflows 400] [--seed 0] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from agentrt.predict.io import KINDS, fit_and_evaluate
from agentrt.predict.samples import expand, samples_from_workload, split_samples
from agentrt.workloads.registry import workload_names

BATCHES = (1, 16, 64, 256)


def inference_us(pred, states, batch: int, budget_s: float = 0.3) -> float:
    """Median microseconds per workflow of one predict_batch call on `batch` states."""
    reps = (states * (batch // max(len(states), 1) + 1))[:batch]
    pred.predict_batch(reps)   # warm up
    times = []
    t_end = time.perf_counter() + budget_s
    while len(times) < 5 or (time.perf_counter() < t_end and len(times) < 2000):
        t0 = time.perf_counter()
        pred.predict_batch(reps)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) / batch * 1e6


def run(workload: str, workflows: int, seed: int, horizon: int) -> dict:
    samples = samples_from_workload(workload, workflows, seed)
    train, held = split_samples(samples, 0.2, seed)
    states = expand(held, horizon).states
    doc = {"workload": workload, "workflows": workflows, "train_workflows": len(train),
           "heldout_workflows": len(held), "heldout_states": len(states), "kinds": {}}
    for kind in ("markov",) + tuple(k for k in KINDS if k != "markov"):
        pred, rep = fit_and_evaluate(kind, train, held, horizon, seed)
        doc["kinds"][kind] = {**rep.to_json(),
                              "inference_us_per_workflow": {b: inference_us(pred, states, b) for b in BATCHES}}
    return doc


def print_doc(doc: dict) -> None:
    print(f"\n== {doc['workload']}: {doc['workflows']} workflows, trained on {doc['train_workflows']}, "
          f"held out {doc['heldout_workflows']} ({doc['heldout_states']} states)")
    kinds = doc["kinds"]
    print(f"{'kind':10s} {'train s':>8s} {'epochs':>6s}  " +
          "  ".join(f"k={s['step']} top1/logloss" for s in next(iter(kinds.values()))["steps"]))
    for kind, r in kinds.items():
        cells = "  ".join(f"{s['top1']:8.3f}/{s['log_loss']:6.3f}" for s in r["steps"])
        print(f"{kind:10s} {r['train_seconds']:8.2f} {r['epochs']:6d}  {cells}")
    print(f"{'kind':10s} " + " ".join(f"{'B=' + str(b) + ' us/wf':>13s}" for b in BATCHES))
    for kind, r in kinds.items():
        print(f"{kind:10s} " + " ".join(f"{r['inference_us_per_workflow'][b]:13.1f}" for b in BATCHES))


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.predictor", description=__doc__.splitlines()[0])
    default = "mix" if "mix" in workload_names() else "team"
    ap.add_argument("--workloads", default=default, help="comma-separated workload names")
    ap.add_argument("--workflows", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--horizon", type=int, default=4)
    ap.add_argument("--json", default=None, help="write the results as JSON here")
    args = ap.parse_args()
    docs = []
    for name in [w.strip() for w in args.workloads.split(",") if w.strip()]:
        doc = run(name, args.workflows, args.seed, args.horizon)
        print_doc(doc)
        sys.stdout.flush()
        docs.append(doc)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(docs, f, indent=2)


if __name__ == "__main__":
    main()

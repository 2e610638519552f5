"""Simulator speed: block touches per wall-clock second under LRU on a large generated trace.

A block touch is one block matched (GPU or host hit) or inserted (computed prompt or output
block). Reports two figures from one run of each:
- replay from calls already in memory (the simulator and cache alone), and
- replay from a trace file on disk (adds JSON parsing and validation),
for the built-in `team` workload at a GPU capacity that forces evictions.

    python -m benchmarks.sim_speed [--workflows 3000] [--gpu-blocks 6000] [--block-size 16]
                                   [--repeat 3] [--json docs/results/sim_speed.json]

Each replay runs `--repeat` times; the best (shortest) wall time is reported, since on a shared
machine every slower run measures a neighbour, not the simulator.

Target (issue 2): at least 1,000,000 touches per second on one core of the 2-core dev machine.
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path

from agentrt.engine.presets import get_preset
from agentrt.engine.simulator import EngineConfig, Simulator
from agentrt.policies.lru import LRUPolicy
from agentrt.trace.reader import TraceReader
from agentrt.trace.writer import write_trace
from agentrt.workloads.base import GenConfig
from agentrt.workloads.registry import get_workload


def run(calls, args) -> dict:
    cfg = EngineConfig(preset=get_preset("llama3.1-8b-h100"), block_size=args.block_size,
                       gpu_blocks=args.gpu_blocks, host_blocks=args.host_blocks)
    sim = Simulator(cfg, LRUPolicy(), iter(calls), concurrency=args.concurrency)
    t0 = time.perf_counter()
    m = sim.run()
    wall = time.perf_counter() - t0
    return {"calls": m.calls, "touches": m.block_touches, "wall_s": wall,
            "touches_per_s": m.block_touches / wall, "hit_rate": m.gpu_hit_tokens / m.prompt_tokens,
            "evictions": m.evictions}


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.sim_speed", description=__doc__.splitlines()[0])
    ap.add_argument("--workflows", type=int, default=3000)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--gpu-blocks", type=int, default=6000)
    ap.add_argument("--host-blocks", type=int, default=0)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=3, help="runs of each replay; the best is reported")
    ap.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = ap.parse_args()
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    if args.json and not args.json.parent.is_dir():
        ap.error(f"--json: directory {args.json.parent} does not exist")
    wl = get_workload("team")
    cfg = GenConfig(workflows=args.workflows, concurrency=args.concurrency, seed=args.seed,
                    block_size=args.block_size)
    t0 = time.perf_counter()
    calls = list(wl.generate(cfg))
    gen_s = time.perf_counter() - t0
    print(f"generated {len(calls):,} calls of {args.workflows:,} workflows in {gen_s:.1f} s")
    mem = min((run(calls, args) for _ in range(args.repeat)), key=lambda r: r["wall_s"])
    print(f"in memory: {mem['touches']:,} block touches in {mem['wall_s']:.2f} s = "
          f"{mem['touches_per_s']:,.0f} touches/s (hit rate {100 * mem['hit_rate']:.1f}%, "
          f"{mem['evictions']:,} evictions; best of {args.repeat})")
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "bench.jsonl"
        write_trace(path, wl.header(cfg), calls)
        disk = min((run(iter(TraceReader(path)), args) for _ in range(args.repeat)),
                   key=lambda r: r["wall_s"])
    print(f"from file: {disk['touches']:,} block touches in {disk['wall_s']:.2f} s = "
          f"{disk['touches_per_s']:,.0f} touches/s (best of {args.repeat})")
    if args.json:
        args.json.write_text(json.dumps({
            "command": "python -m benchmarks.sim_speed " + " ".join(
                f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if k != "json"),
            "python": platform.python_version(), "calls": len(calls),
            "in_memory": mem, "from_file": disk}, indent=2) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()

"""Simulator speed: block touches per wall-clock second under LRU on a large generated trace.

A block touch is one block matched (GPU or host hit) or inserted (computed prompt or output
block). Reports two figures from one run of each:
- replay from calls already in memory (the simulator and cache alone), and
- replay from a trace file on disk (adds JSON parsing and validation),
for the built-in `team` workload at a GPU capacity that forces evictions.

    python -m benchmarks.sim_speed [--workflows 3000] [--gpu-blocks 6000] [--block-size 16]

Target (issue 2): at least 1,000,000 touches per second on one core of the 2-core dev machine.
"""

from __future__ import annotations

import argparse
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
    args = ap.parse_args()
    wl = get_workload("team")
    cfg = GenConfig(workflows=args.workflows, concurrency=args.concurrency, seed=args.seed,
                    block_size=args.block_size)
    t0 = time.perf_counter()
    calls = list(wl.generate(cfg))
    gen_s = time.perf_counter() - t0
    print(f"generated {len(calls):,} calls of {args.workflows:,} workflows in {gen_s:.1f} s")
    mem = run(calls, args)
    print(f"in memory: {mem['touches']:,} block touches in {mem['wall_s']:.2f} s = "
          f"{mem['touches_per_s']:,.0f} touches/s (hit rate {100 * mem['hit_rate']:.1f}%, "
          f"{mem['evictions']:,} evictions)")
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "bench.jsonl"
        write_trace(path, wl.header(cfg), calls)
        disk = run(iter(TraceReader(path)), args)
    print(f"from file: {disk['touches']:,} block touches in {disk['wall_s']:.2f} s = "
          f"{disk['touches_per_s']:,.0f} touches/s")


if __name__ == "__main__":
    main()

"""Policy overhead: observe time per block touch, score time per call, runtime state size.

For each policy and workload, one simulator replay with the runtime instrumented:
- observe: wall time spent in `AgentRuntime.observe` (the runtime's bookkeeping plus the
  policy's, and the LRU safety net's) divided by the replay's block touches; `net`: the part of
  it the safety net took (its sampled shadow LRU and test, `runtime/safety_net.py`; 0 for LRU,
  which has no net, and with `--no-safety-net`);
- score: mean time of one `score(block)` call as the cache makes it (through the safety net
  where there is one), timed over the blocks cached at the end of the replay (after a first
  call has brought the policy's lazy state up to date);
- state: deep sizes in bytes, sampled during the replay (peaks reported), of (a) the policy's own
  objects (transition counts, survival tables, step graph, predictions; the predictor's weights
  excluded), (b) the runtime's tables (live workflows, agent profiles with their anchors, calls
  in flight, the safety net's shadow LRU), and (c) the block tags shared by several threads (a block with one user points at
  its thread directly and costs nothing extra). The cache's own blocks are not counted.

    python -m benchmarks.policy_overhead [--workloads team,mix] [--policies lru,cachesage,...]
    python -m benchmarks.policy_overhead --shares-tenants 100,1000,10000
    python -m benchmarks.policy_overhead --clock cpu [--no-safety-net]   # CPU time, net on / off

`--shares-tenants` times instead one re-check of tenant KV shares (`TenantShares.recheck`, what the
simulator runs per event and vLLM's connector per scheduler step) with that many tenants holding
blocks (1-20 each, a third with running requests' blocks too, the pool 12 blocks a tenant), one
tenant's count changing between re-checks; equal weights and one tenant weighted 2.

CacheSage's paper reports about 1 us per block touch, single-digit us per score, < 25 KB state.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time

from agentrt.bench.runner import BenchOptions, make_trained_policy
from agentrt.bench.source import workload_source
from agentrt.cache.block import Block
from agentrt.engine.presets import get_preset
from agentrt.engine.simulator import EngineConfig, Simulator
from agentrt.runtime.runtime import AgentRuntime
from agentrt.runtime.state import BlockTag
from agentrt.workloads.base import GenConfig


def deep_size(obj, seen=None) -> int:
    """Bytes of `obj` and what it references, not descending into cache blocks or modules."""
    seen = set() if seen is None else seen
    stack = [obj]
    total = 0
    while stack:
        o = stack.pop()
        if id(o) in seen or isinstance(o, (Block, type)) or type(o).__name__ in ("module", "function", "method"):
            continue
        seen.add(id(o))
        total += sys.getsizeof(o)
        if isinstance(o, dict):
            stack.extend(o.keys())
            stack.extend(o.values())
        elif isinstance(o, (list, tuple, set, frozenset)):
            stack.extend(o)
        elif hasattr(o, "__dict__"):
            stack.append(vars(o))
        if hasattr(type(o), "__slots__"):
            for s in type(o).__slots__:
                if hasattr(o, s):
                    stack.append(getattr(o, s))
    return total


def policy_state(rt: AgentRuntime, cache) -> dict:
    """Bytes of: the policy's own objects, the runtime's tables, and the block tags."""
    skip = {id(cache), id(rt.touch_clock)}
    pol = {k: v for k, v in vars(rt.policy).items() if k not in ("runtime", "predictor")}
    out = {"policy": deep_size(pol, set(skip)),
           "runtime": deep_size([rt.workflows, rt.agents, rt._calls, rt.between_calls,
                                 rt.net.shadow if rt.net is not None else None], set(skip)),
           "tags": 0}
    seen = set()
    for root in cache.roots.values():
        stack = [root]
        while stack:
            b = stack.pop()
            if isinstance(b.meta, BlockTag) and id(b.meta) not in seen:
                seen.add(id(b.meta))
                out["tags"] += sys.getsizeof(b.meta) + sys.getsizeof(b.meta.threads)
            stack.extend(b.children.values())
    return out


def measure(workload: str, policy: str, args) -> dict:
    source = workload_source(workload, GenConfig(workflows=args.workflows, seed=0))
    opts = BenchOptions(gpu_blocks=args.gpu_blocks, host_blocks=args.host_blocks)
    source.train_workflows = int(source.workflows * 0.25) if args.train else 0
    pol = make_trained_policy(policy, source, opts)
    cfg = EngineConfig(preset=get_preset(opts.preset), block_size=source.header.block_size,
                       gpu_blocks=args.gpu_blocks, host_blocks=args.host_blocks)
    rt = AgentRuntime(pol, safety_net=args.safety_net)
    sim = Simulator(cfg, rt, source.eval_calls(), concurrency=source.header.concurrency)
    clock = time.thread_time if args.clock == "cpu" else time.perf_counter
    spent = [0.0]
    net_spent = [0.0]
    if rt.net is not None:
        net_observe = rt.net.observe

        def timed_net(e):
            t0 = clock()
            net_observe(e)
            net_spent[0] += clock() - t0
        rt.net.observe = timed_net
    peak = {"policy": 0, "runtime": 0, "tags": 0}
    count = [0]
    inner = rt.observe

    def timed(e):
        t0 = clock()
        inner(e)
        spent[0] += clock() - t0
        count[0] += 1
        if count[0] % 2000 == 0:
            for k, v in policy_state(rt, sim.cache).items():
                peak[k] = max(peak[k], v)

    if rt.wants_events:
        sim.observers.observe = timed
    t0 = time.perf_counter()
    m = sim.run()
    wall = time.perf_counter() - t0
    for k, v in policy_state(rt, sim.cache).items():
        peak[k] = max(peak[k], v)
    blocks = []
    for root in sim.cache.roots.values():
        stack = [root]
        while stack:
            b = stack.pop()
            if b.parent is not None:
                blocks.append(b)
            stack.extend(b.children.values())
    blocks = blocks[:5000]
    score_us = 0.0
    if blocks:
        score = rt.ranker.score       # what the cache calls: the policy's, through the net if any
        score(blocks[0])
        gc.disable()
        t0 = clock()
        for b in blocks:
            score(b)
        score_us = (clock() - t0) / len(blocks) * 1e6
        gc.enable()
    source.close()
    return {"workload": workload, "policy": policy, "touches": m.block_touches,
            "observe_us_per_touch": spent[0] / max(1, m.block_touches) * 1e6,
            "net_us_per_touch": net_spent[0] / max(1, m.block_touches) * 1e6,
            "score_us": score_us, "policy_kb": peak["policy"] / 1024,
            "runtime_kb": peak["runtime"] / 1024, "tags_kb": peak["tags"] / 1024, "replay_s": wall,
            "hit_rate": m.gpu_hit_tokens / max(1, m.prompt_tokens)}


def shares_recheck(counts: list[int]) -> None:
    import random
    from types import SimpleNamespace

    from agentrt.policies.registry import make_policy
    from agentrt.sched.kvshare import TenantShares
    print(f"{'tenants':>8s} {'weights':>8s} {'recheck ms':>11s} {'over share':>11s} {'over level':>11s}")
    for n in counts:
        rng = random.Random(0)
        cache = SimpleNamespace(tenant_blocks={f"t{i}": rng.randint(1, 20) for i in range(n)},
                                tenant_reserved={f"t{i}": rng.randint(0, 3) for i in range(0, n, 3)},
                                gpu_capacity=12 * n)
        for weights in (None, {"t1": 2.0}):
            shares = TenantShares(make_policy("lru"), weights)
            shares.attach(cache)
            shares.recheck()
            reps = max(20, 50_000 // n)
            t0 = time.perf_counter()
            for _ in range(reps):
                cache.tenant_blocks["t0"] += 1
                shares.recheck()
            ms = (time.perf_counter() - t0) / reps * 1e3
            print(f"{n:8d} {'one x2' if weights else 'equal':>8s} {ms:11.3f} {len(shares.over):11d} "
                  f"{len(shares.beyond):11d}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.policy_overhead", description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default="mix,gaia")
    ap.add_argument("--policies", default="lru,cachesage,kvflow,ttl,pbkv-lae,pbkv-he,pbkv,pbkv-ta")
    ap.add_argument("--workflows", type=int, default=200)
    ap.add_argument("--gpu-blocks", type=int, default=6000)
    ap.add_argument("--host-blocks", type=int, default=12000)
    ap.add_argument("--no-train", dest="train", action="store_false")
    ap.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                    help="time observe and score by wall clock (the published tables) or by this "
                         "thread's CPU time (steadier on a machine other work shares)")
    ap.add_argument("--no-safety-net", dest="safety_net", action="store_false",
                    help="without the runtime's LRU safety net (its cost is the difference)")
    ap.add_argument("--shares-tenants", default=None, metavar="N,N,...",
                    help="time tenant KV shares' re-check at these tenant counts instead")
    args = ap.parse_args()
    if args.shares_tenants:
        shares_recheck([int(x) for x in args.shares_tenants.split(",")])
        return
    print(f"{'workload':14s} {'policy':16s} {'observe us/touch':>17s} {'net us':>7s} {'score us':>9s} "
          f"{'policy KB':>10s} {'runtime KB':>11s} {'tags KB':>8s} {'replay s':>9s} {'hit rate':>9s}")
    for w in args.workloads.split(","):
        for p in args.policies.split(","):
            r = measure(w, p, args)
            print(f"{w:14s} {p:16s} {r['observe_us_per_touch']:17.3f} {r['net_us_per_touch']:7.3f} {r['score_us']:9.2f} "
                  f"{r['policy_kb']:10.1f} {r['runtime_kb']:11.1f} {r['tags_kb']:8.1f} "
                  f"{r['replay_s']:9.2f} {100 * r['hit_rate']:8.1f}%")


if __name__ == "__main__":
    main()

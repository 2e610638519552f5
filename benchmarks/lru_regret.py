"""Why a policy loses to LRU: hits per call kind, and the eviction decisions it makes unlike LRU's.

    python -m benchmarks.lru_regret --trace coding.jsonl --gpu-blocks 14187 --policies pbkv-he,pbkv-ta
    python -m benchmarks.lru_regret --trace coding.jsonl --gpu-blocks 14187 --policies pbkv-he --timeline 250

Each policy replays the trace without the safety net (the policy's own order; the bench's 25%
training split). Two tables:
- hits per call kind: GPU hit % of each agent's prompt tokens under LRU, the policy and the
  oracle (as `benchmarks/oracle_gap.py`'s per-agent table);
- decisions unlike LRU's: at each eviction where the policy's first victim v is not LRU's (the
  least recently touched evictable leaf u), what v and u were, and which one a later call read
  first (Belady's judgement of the two: v read first = the policy kept the wrong block). A block's
  kind: `anchor` (a confirmed agent anchor: system prompt and tools), `ended` (no live thread),
  else the agents of the live threads that tagged it (`main+compact`: a history the compaction
  call read too), `/dead` when it is on none of those threads' current paths (a branch they
  left: a compacted history, a parallel instance's earlier branch), and its workflow's state:
  `run` (a call in flight), `idle` (waiting on a tool or its framework) under or over 10 s.
Counts are of eviction calls (one decision each), so they rank causes rather than weigh tokens.
`--timeline N` instead: when the policy loses, and when the safety net acts. Calls in LRU's
admission order, N at a time; per window the prompt blocks LRU misses, the extra blocks the policy
misses on the same calls without the net and with it (the default run), the running sum of the
latter, and the share of those calls the net admitted in LRU order (fallback).
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

from agentrt.bench.runner import (BenchOptions, engine_config, make_bench_scheduler,
                                  make_trained_policy, plan_split)
from agentrt.bench.source import file_source
from agentrt.cache.block import GPU
from agentrt.engine.simulator import Simulator
from agentrt.runtime import events as ev
from agentrt.runtime.state import threads_of

INF = float("inf")


def kind(block, now: float, anchors: set) -> str:
    if (block.tenant, block.hash) in anchors:
        return "anchor"
    live = [t for t in threads_of(block.meta) if not t.workflow.ended] if block.meta is not None else []
    if not live:
        return "ended"
    on_path = any(_above(block, th.last_node) for th in live)
    wf = live[-1].workflow
    state = "run" if wf.running else ("idle<10s" if now - (wf.last_finish or now) < 10 else "idle>=10s")
    return "+".join(sorted({th.agent for th in live})) + ("" if on_path else "/dead") + ":" + state


def _above(block, node) -> bool:
    """`block` is `node` or one of its ancestors."""
    while node is not None:
        if node is block:
            return True
        node = node.parent
    return False


class Probe(Simulator):
    """The simulator, counting hits per agent and judging evictions unlike LRU's."""

    def __init__(self, *a, judge: bool = True, **kw) -> None:
        super().__init__(*a, **kw)
        self.by_agent = collections.defaultdict(lambda: [0, 0])
        # (workflow, call index) -> (full prompt blocks, GPU hit blocks, admitted in fallback), first admission
        self.per_call: dict[tuple[str, int], tuple[int, int, bool]] = {}
        self.order: list[tuple[str, int]] = []
        self.decisions: list[list] = []        # [kind evicted, kind kept, next read v, next read u]
        self._waiting = collections.defaultdict(list)
        inner = self.observers.observe

        def observe(e):
            if type(e) is ev.CallAdmitted and not e.call.warmup:
                c = self.by_agent[e.call.agent]
                c[0] += e.call.input_length
                c[1] += min(e.gpu_hit * e.call.block_size, e.call.input_length - 1)
                key = (e.call.workflow, e.call.index)
                if key not in self.per_call:
                    net = self.runtime.net
                    self.per_call[key] = (e.call.n_full, e.gpu_hit, net is not None and net.fallback)
                    self.order.append(key)
            elif type(e) is ev.CallArrived and not e.call.warmup:
                info = e.call
                for h in info.hash_ids[:info.n_full]:
                    for d, i in self._waiting.pop((info.tenant, h), ()):
                        d[i] = min(d[i], e.now)
            return inner(e)
        self.observers.observe = observe
        self.observers.on = True
        if judge:
            evict = self.cache.evict

            def judged(n: int) -> int:
                self._judge()
                return evict(n)
            self.cache.evict = judged

    def _judge(self) -> None:
        cache = self.cache
        live = [b for _, s, b in cache.heaps.gpu if b.heap_seq == s and not b.lock_ref
                and not b.gpu_children and b.tier == GPU]
        if not live:
            return
        u = min(live, key=lambda b: b.last_touch)
        peek = cache.heaps.peek()
        if peek is None or peek[1] is u:
            return
        v = peek[1]
        anchors = {(p.tenant, h) for p in self.runtime.agents.values() if p.anchor_workflows >= 2
                   for h in p.anchor}
        d = [kind(v, self.now, anchors), kind(u, self.now, anchors), INF, INF]
        self.decisions.append(d)
        self._waiting[(v.tenant, v.hash)].append((d, 2))
        self._waiting[(u.tenant, u.hash)].append((d, 3))


def replay(src, opts: BenchOptions, policy: str, judge: bool, net: bool = False) -> Probe:
    cfg = engine_config(opts, src.header.block_size)
    sim = Probe(cfg, make_trained_policy(policy, src, opts), src.eval_calls(),
                concurrency=src.header.concurrency, scheduler=make_bench_scheduler(opts),
                safety_net=net, judge=judge, record_stream=policy == "lru")
    sim.run()
    return sim


def agent_hits(sim) -> dict[str, tuple[int, float]]:
    return {a: (p, 100.0 * h / max(1, p)) for a, (p, h) in sim.by_agent.items()}


def decisions(sim, top: int = 8) -> list[tuple[str, str, int, int, int]]:
    """(evicted kind, kept kind, decisions, worse than LRU's, better), the most frequent first."""
    agg: dict = collections.defaultdict(lambda: [0, 0, 0])
    for kv, ku, nv, nu in sim.decisions:
        a = agg[(kv, ku)]
        a[0] += 1
        a[1] += nv < nu
        a[2] += nu < nv
    rows = sorted(agg.items(), key=lambda kv: (-kv[1][1], -kv[1][0]))
    return [(kv, ku, n, bad, good) for (kv, ku), (n, bad, good) in rows[:top]]


def analyse(trace: Path, gpu_blocks: int, policies: list[str]) -> dict:
    """Per-agent hits (LRU, each policy, oracle) and each policy's decisions unlike LRU's."""
    src = file_source(trace)
    opts = BenchOptions(gpu_blocks=gpu_blocks)
    plan_split(src, ["lru", *policies, "oracle"], opts)
    lru = replay(src, opts, "lru", judge=False)
    out = {"hits": {"lru": agent_hits(lru)}, "decisions": {}, "totals": {}}
    for p in policies:
        sim = replay(src, opts, p, judge=True)
        out["hits"][p] = agent_hits(sim)
        out["decisions"][p] = decisions(sim)
        bad = sum(nv < nu for _, _, nv, nu in sim.decisions)
        good = sum(nu < nv for _, _, nv, nu in sim.decisions)
        out["totals"][p] = (len(sim.decisions), bad, good)
    out["hits"]["oracle"] = _oracle_agents(src, opts, lru.admitted)
    return out


def _oracle_agents(src, opts, order) -> dict[str, tuple[int, float]]:
    from agentrt.policies.oracle import FutureUses, OraclePolicy
    cfg = engine_config(opts, src.header.block_size)
    best = None
    for _ in range(2):           # as `run_oracle`: the LRU order, then its own; the best pass counts
        sim = Probe(cfg, OraclePolicy(FutureUses(src.eval_calls(), order, src.header.block_size)),
                    src.eval_calls(), concurrency=src.header.concurrency,
                    scheduler=make_bench_scheduler(opts), record_stream=True, judge=False)
        sim.run()
        if best is None or sim.metrics.gpu_hit_tokens > best.metrics.gpu_hit_tokens:
            best = sim
        order = sim.admitted
    return agent_hits(best)


def timeline(trace: Path, gpu_blocks: int, policy: str, window: int) -> list[dict]:
    """Per window of `window` calls in LRU's admission order (see the module docstring)."""
    src = file_source(trace)
    opts = BenchOptions(gpu_blocks=gpu_blocks)
    plan_split(src, ["lru", policy], opts)
    lru = replay(src, opts, "lru", judge=False)
    off = replay(src, opts, policy, judge=False)
    on = replay(src, opts, policy, judge=False, net=True)
    rows, total = [], 0
    for i in range(0, len(lru.order), window):
        keys = lru.order[i:i + window]
        miss = {name: sum(s.per_call[k][0] - s.per_call[k][1] for k in keys if k in s.per_call)
                for name, s in (("lru", lru), ("off", off), ("on", on))}
        total += miss["on"] - miss["lru"]
        fb = sum(on.per_call[k][2] for k in keys if k in on.per_call)
        rows.append({"calls": f"{i}-{i + len(keys) - 1}", "blocks": sum(lru.per_call[k][0] for k in keys),
                     "lru_miss": miss["lru"], "extra_no_net": miss["off"] - miss["lru"],
                     "extra_net": miss["on"] - miss["lru"], "extra_net_sum": total,
                     "fallback_share": fb / max(1, len(keys))})
    return rows


def render_timeline(rows: list[dict], policy: str) -> str:
    out = [f"| calls (LRU's order) | prompt blocks | LRU misses | {policy} extra, no net | with the net | "
           "its running sum | in fallback |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        out.append(f"| {r['calls']} | {r['blocks']:,} | {r['lru_miss']:,} | {r['extra_no_net']:+,} | "
                   f"{r['extra_net']:+,} | {r['extra_net_sum']:+,} | {100 * r['fallback_share']:.0f}% |")
    return "\n".join(out)


def render(res: dict, policies: list[str]) -> str:
    cols = ["lru", *policies, "oracle"]
    agents = sorted(res["hits"]["lru"], key=lambda a: -res["hits"]["lru"][a][0])
    out = ["| call kind | prompt tokens | " + " | ".join(cols) + " |",
           "| --- | ---: | " + " | ".join("---:" for _ in cols) + " |"]
    for a in agents:
        out.append(f"| {a} | {res['hits']['lru'][a][0]:,} | "
                   + " | ".join(f"{res['hits'][c].get(a, (0, 0.0))[1]:.1f}" for c in cols) + " |")
    out.append("\nEvictions where the policy's victim is not LRU's, by what it evicted and what it "
               "kept instead (worse: a later call read the evicted block first):\n")
    out.append("| policy | evicted | kept instead | decisions | worse than LRU's | better |")
    out.append("| --- | --- | --- | ---: | ---: | ---: |")
    for p in policies:
        n, bad, good = res["totals"][p]
        out.append(f"| {p} | all | | {n:,} | {bad:,} | {good:,} |")
        for kv, ku, m, b, g in res["decisions"][p]:
            out.append(f"| {p} | {kv} | {ku} | {m:,} | {b:,} | {g:,} |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.lru_regret", description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, required=True)
    ap.add_argument("--gpu-blocks", type=int, required=True)
    ap.add_argument("--policies", default="cachesage,pbkv-lae,pbkv-he,pbkv-ta")
    ap.add_argument("--timeline", type=int, metavar="N", default=0,
                    help="per N calls: when each policy loses to LRU and when the net acts")
    a = ap.parse_args()
    pols = a.policies.split(",")
    if a.timeline:
        for p in pols:
            print(render_timeline(timeline(a.trace, a.gpu_blocks, p, a.timeline), p), "\n")
        return
    print(render(analyse(a.trace, a.gpu_blocks, pols), pols))


if __name__ == "__main__":
    sys.exit(main())

"""Where PBKV-TA's gap to the oracle lies: what each piece of the future is worth, and hits per agent.

    python -m benchmarks.oracle_gap                        # every regime where the oracle >= 1.3x LRU
    python -m benchmarks.oracle_gap --workloads gaia --no-docs

Each regime is a row of the regime sweep (`benchmarks/regimes.py`, same trace and memory). Each
column gives PBKV-TA a piece of the future, taken from its own earlier replay of
the same trace (the simulator is deterministic; a timing column runs twice, the second time on the times of
its first run, which are closer to its own timing), and changes nothing else: the cache, its
memory accounting, anchors and retired blocks are those of `pbkv-ta`.
- `+ more data`: the predictor trained on 240 other workflows of the same generator (seed 101)
  instead of the 20-workflow split; every column is scored on the same workflows.
- `+ step times`: when each of the workflow's next K+1 calls arrives (the durations of every
  call, tool and wait); which agent makes each call is still predicted.
- `+ thread times`: when each live thread is next called, or that it never is (the agent
  sequence and the durations).
- `+ dead blocks`: blocks no later call reads go first (the oracle's first rule; the rest of
  its order is per block); alone, then with thread times.
The pieces interact (the table shows each alone and the two largest together), so the columns do
not add up.
What a column adds is information an online policy can learn only where it is predictable: the
`more data` column tells whether the predictor is short of data or the workflows are random.
The per-agent table shows where the oracle spends its memory differently (one regime per workload).
"""

from __future__ import annotations

import argparse
import bisect
import collections
import json
from pathlib import Path

import numpy as np

from agentrt.bench.runner import (BenchOptions, engine_config, make_bench_scheduler,
                                  make_trained_policy, plan_split)
from agentrt.bench.source import file_source
from agentrt.engine.simulator import Simulator
from agentrt.policies.oracle import NEVER, FutureUses, OraclePolicy
from agentrt.policies.pbkv import PBKVTimePolicy
from agentrt.policies.pbkv.timing import TINY, thread_density
from agentrt.runtime import events as ev
from agentrt.trace.reader import TraceReader
from benchmarks.results import DOCS, write
from benchmarks.tails import rows, trace_of

# column -> (what the timing is told: None, "step" or "thread"; whether dead blocks are told)
TOLD = {"+ step times": ("step", False), "+ thread times": ("thread", False),
        "+ dead blocks": (None, True), "+ thread times + dead blocks": ("thread", True)}
RUNGS = ["pbkv-ta", "+ more data", *TOLD]
MORE_DATA: dict[Path, object] = {}    # the "more data" predictor of each shared training trace


class Told(PBKVTimePolicy):
    """PBKV-TA told part of the future (see the module docstring); records its own arrivals."""

    def __init__(self, timing: str | None, truth: dict | None, future: FutureUses | None, **kw) -> None:
        super().__init__(**kw)
        self.timing, self.truth, self.future = timing, truth, future
        self.seen = {"wf": collections.defaultdict(list), "thread": collections.defaultdict(list)}

    def observe(self, e) -> None:
        t = type(e)
        if t is ev.CallArrived and not e.call.warmup:
            self.seen["wf"][e.call.workflow].append(e.now)
            self.seen["thread"][(e.call.workflow, e.call.agent)].append(e.now)
        if self.future is not None and (t is ev.CallAdmitted or t is ev.CallFinished) and not e.call.warmup:
            i = e.call
            if self.future.consume(i.workflow, i.index, i.tenant, i.hash_ids, i.n_full) and t is ev.CallFinished:
                self.epoch += 1
        super().observe(e)

    def _densities(self) -> None:
        if self.timing is None or self.truth is None:
            return super()._densities()
        now, idx = self.now, self._index
        for wid, o in self._out.items():
            wf = self.runtime.workflows.get(wid)
            if wf is None or wf.ended:
                continue
            if self.timing == "step":
                k = o.shape[0]
                lst = self.truth["wf"].get(wid, [])
                fut = lst[bisect.bisect_right(lst, now):][:k + 1] or [now + 1e6]
                rel = np.maximum(np.array(fut + [fut[-1] + 1e6] * (k + 1 - len(fut))) - now, 0.0)
                dens = thread_density(o[:, :-1], rel)
                for agent, th in wf.threads.items():
                    i = idx.get(agent)
                    th.value = float(dens[i]) if i is not None else 0.0
            else:
                for agent, th in wf.threads.items():
                    lst = self.truth["thread"].get((wid, agent), [])
                    j = bisect.bisect_right(lst, now)
                    th.value = 1.0 / max(lst[j] - now, TINY) if j < len(lst) else 0.0

    def score(self, block):
        if self.future is not None and self.future.next_use(block.tenant, block.hash) == NEVER:
            return (0, block.last_touch)
        return super().score(block)


class AgentHits(Simulator):
    """The simulator, counting prompt and GPU-hit tokens per agent at admission."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.by_agent = collections.defaultdict(lambda: [0, 0])
        inner = self.observers.observe

        def observe(e):
            if type(e) is ev.CallAdmitted and not e.call.warmup:
                c = self.by_agent[e.call.agent]
                c[0] += e.call.input_length
                c[1] += min(e.gpu_hit * e.call.block_size, e.call.input_length - 1)
            return inner(e)
        self.observers.observe = observe
        self.observers.on = True


def hit(sim) -> float:
    return 100.0 * sim.metrics.gpu_hit_tokens / max(1, sim.metrics.prompt_tokens)


def regime(row: dict, tmp: Path) -> dict:
    trace = trace_of(row, tmp)
    src = file_source(trace)
    opts = BenchOptions(gpu_blocks=row["gpu_blocks"])
    plan_split(src, ["lru", "pbkv-ta", "oracle"], opts)
    cfg, conc = engine_config(opts, src.header.block_size), src.header.concurrency
    base = make_trained_policy("pbkv-ta", src, opts)

    def replay(policy, stream: bool = False) -> AgentHits:
        sim = AgentHits(cfg, policy, src.eval_calls(), concurrency=conc, record_stream=stream,
                        scheduler=make_bench_scheduler(opts))
        sim.run()
        return sim

    out, agents = {}, {}
    lru = replay(make_trained_policy("lru", src, opts), stream=True)
    out["lru"], agents["lru"] = hit(lru), dict(lru.by_agent)
    first = Told(None, None, None, predictor=base.predictor)
    sim = replay(first, stream=True)
    out["pbkv-ta"], agents["pbkv-ta"] = hit(sim), dict(sim.by_agent)
    more = tmp / f"{trace.stem}-train.jsonl"
    if not more.exists():      # the f = 0.5 and f = 1 rows of a workload share their traces
        trace_of({**row, "generate": row["generate"].replace("--workflows 80", "--workflows 240")},
                 tmp, seed=101).rename(more)
    big = MORE_DATA.get(more)
    if big is None:            # trained once per trace: the f = 0.5 and f = 1 rows share it
        trainer = PBKVTimePolicy()
        trainer.train(TraceReader(more), src.header.block_size)
        big = MORE_DATA[more] = trainer.predictor
    out["+ more data"] = hit(replay(Told(None, None, None, predictor=big)))
    order = sim.admitted
    for rung, (timing, dead) in TOLD.items():
        truth = first.seen
        for _ in range(2 if timing else 1):
            fut = FutureUses(src.eval_calls(), order, src.header.block_size) if dead else None
            told = Told(timing, truth, fut, predictor=base.predictor)
            last = replay(told)
            truth = told.seen
        out[rung] = hit(last)
    best, order = None, lru.admitted
    for _ in range(2):        # as `run_oracle`: the LRU order, then its own; the best pass counts
        orc = replay(OraclePolicy(FutureUses(src.eval_calls(), order, src.header.block_size)), stream=True)
        if best is None or orc.metrics.gpu_hit_tokens > best.metrics.gpu_hit_tokens:
            best = orc
        order = orc.admitted
    out["oracle"], agents["oracle"] = hit(best), dict(best.by_agent)
    return {"regime": {k: row[k] for k in ("workload", "tool_scale", "concurrency", "capacity_factor", "gpu_blocks")},
            "generate": row["generate"], "hit": out, "by_agent": agents}


def name(r: dict) -> str:
    return f"{r['workload']} | {r['tool_scale']:g} | {r['concurrency']} | {r['capacity_factor']:g}"


def gap_table(done: list[dict]) -> str:
    cols = ["lru", *RUNGS, "oracle"]
    out = ["| workload | tool x | load | f | " + " | ".join(cols) + " |",
           "| --- | ---: | ---: | ---: | " + " | ".join("---:" for _ in cols) + " |"]
    for d in done:
        out.append(f"| {name(d['regime'])} | " + " | ".join(f"{d['hit'][c]:.1f}" for c in cols) + " |")
    gap = [d["hit"]["oracle"] - d["hit"]["pbkv-ta"] for d in done]
    share = {c: [(d["hit"][c] - d["hit"]["pbkv-ta"]) / g for d, g in zip(done, gap) if g > 0.5] for c in RUNGS[1:]}
    out.append("\nShare of the PBKV-TA-to-oracle gap each column closes, median (range) over the "
               f"{len(next(iter(share.values())))} regimes with a gap above 0.5 points: "
               + "; ".join(f"{c} {100 * np.median(v):.0f}% ({100 * min(v):.0f} to {100 * max(v):.0f}%)"
                           for c, v in share.items() if v) + ".")
    return "\n".join(out)


def agent_table(done: list[dict]) -> str:
    out = ["| workload | tool x | load | f | agent | prompt tokens | lru | pbkv-ta | oracle |",
           "| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: |"]
    seen = set()
    for d in done:
        w = d["regime"]["workload"]
        if w in seen:
            continue
        seen.add(w)
        ba = d["by_agent"]
        for agent in sorted(ba["pbkv-ta"], key=lambda a: -ba["pbkv-ta"][a][0]):
            p = ba["pbkv-ta"][agent][0]
            cells = [f"{100 * ba[k].get(agent, [1, 0])[1] / max(1, ba[k].get(agent, [1, 0])[0]):.1f}"
                     for k in ("lru", "pbkv-ta", "oracle")]
            out.append(f"| {name(d['regime'])} | {agent} | {p:,} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main() -> None:
    import tempfile
    ap = argparse.ArgumentParser(prog="python -m benchmarks.oracle_gap", description=__doc__.splitlines()[0])
    ap.add_argument("--min-ratio", type=float, default=1.3, help="regimes where oracle / LRU is at least this")
    ap.add_argument("--workloads", default=None, help="only these workloads (comma-separated)")
    ap.add_argument("--no-docs", action="store_true")
    a = ap.parse_args()
    todo = [r for r in rows(a.min_ratio) if a.workloads is None or r["workload"] in a.workloads.split(",")]
    done = []
    with tempfile.TemporaryDirectory(prefix="agentrt-gap-") as d:
        for i, row in enumerate(todo, 1):
            res = regime(row, Path(d))
            done.append(res)
            print(f"[{i}/{len(todo)}] {name(res['regime'])}: " + ", ".join(f"{k} {v:.1f}" for k, v in res["hit"].items()),
                  flush=True)
    if a.no_docs:
        return
    (DOCS / "results" / "oracle_gap.json").write_text(json.dumps(done, indent=1))
    cmd = "python -m benchmarks.oracle_gap" + (f" --min-ratio {a.min_ratio:g}" if a.min_ratio != 1.3 else "")
    write("oracle-gap", f"Built by `{cmd}` (docs/results/oracle_gap.json has every figure). GPU hit %, "
                        "each column on the regime sweep's trace and memory.\n\n" + gap_table(done)
          + "\n\nGPU hit % per agent (the first such regime of each workload):\n\n" + agent_table(done) + "\n")


if __name__ == "__main__":
    main()

"""Agent admission on the live engine: stock vLLM against agentrt's admission gate.

Below and past stock vLLM's sustainable rate, with the simulator's prediction for the same calls
beside each live figure.

    python -m benchmarks.live_admission --workload team --workflows 24 --seed 0 --runs 3 \\
        --json docs/results/engine/live-admission-team.json
    python -m benchmarks.live_admission --trace my.jsonl --runs 3 --json OUT.json
    python -m benchmarks.live_admission --docs        # re-render docs/notes/results-details.md from the stored JSONs
    python -m benchmarks.live_admission --smoke --preset-file P.json --json OUT.json   # the CI version

Method (each live run is `agentrt bench --engine vllm`, in-process: `enginebench/runner.py`)
1. The engine: a preset measured on it (`--preset-file`, else `agentrt calibrate --engine vllm`,
   about 5 minutes). The simulator replays on it, and the gate reads its prefill times.
2. The calls: `--trace FILE` (open loop: workflows start at their timestamps) or `--workload NAME
   --seed S --workflows N` (generated with Poisson arrivals, `agentrt generate --rate`). A rate is
   reached by stretching the trace's timestamps (`time_scale` = the trace's own rate / the rate),
   so every rate replays the same calls. Nothing is held back for training (`--train-fraction
   0`): PBKV-TA runs on its online forecasts, live and simulated alike.
3. Stock vLLM's sustainable rate R: the highest rate at which stock vLLM (no connector, fcfs, no
   `agentrt serve`) keeps p90 TTFT within the SLO, by doubling or halving from `--rate` (default:
   the trace's own rate) until the SLO is crossed, then `--bisect` geometric bisection steps, one
   run each (as benchmarks/goodput.py does in the simulator). The SLO is `--slo` seconds, else
   `--slo-factor` x what the preset says the trace's p90 prompt costs alone (its prefill plus the
   request overhead), so it scales with the engine and the workload.
4. At 0.8 R and 1.2 R, `--runs` runs of each pair (`--pairs`): `stock`; `fcfs+pbkv-ta` (the
   connector, no gate); `las+lru` and `agent+pbkv-ta` (`agentrt serve --scheduler` in front of
   vLLM: the gate users get, `enginebench/front.py`). Per pair the median and range of mean and
   p99 workflow E2E, TTFT p50/p90/p99 and hit rate; beside them the simulator's figures for the
   same calls (the run's `replayed-engine.jsonl` on the preset, as benchmarks/fidelity.py does).
5. Goodput at the SLO per pair: the highest rate within it, from the 0.8 R and 1.2 R medians (for
   stock also the search's probes), then, for the other pairs, `--goodput-steps` probes (one run
   each) expanding past them or bisecting between them.
JSON (`--json`): {"sustainable_rate": R, "slo_ttft_p90_s", "loads": {"0.8": {PAIR: M, ...},
"1.2": {...}}, "goodput": {PAIR: rate}, "criteria": {...}, "bisection": [...], "settings":
{...}}, PAIR keyed SCHEDULER+POLICY and stock vLLM as `stock`, each M holding the medians
`e2e_mean_s`, `e2e_p99_s`, `ttft_p50_s`, `ttft_p99_s` (and more) and the simulator's
`sim_e2e_mean_s`. `--docs` renders every docs/results/engine/live-admission-*.json between the
`live-admission` markers of docs/notes/results-details.md.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

from benchmarks.fidelity import agentrt, work_and_preset
from benchmarks.live_admission_report import FIGURES, RESULTS, criteria, markdown, summarise, write_docs  # noqa: F401

PAIRS = {"stock": ("stock", "fcfs"), "fcfs+pbkv-ta": ("pbkv-ta", "fcfs"), "las+lru": ("lru", "las"),
         "agent+pbkv-ta": ("pbkv-ta", "agent")}


def trace_rate(path: Path) -> float:
    """Workflows per second the trace starts (first call's timestamp per workflow); refuses a
    closed-loop trace, whose load a rate cannot set."""
    from agentrt.trace.reader import TraceReader
    r = TraceReader(path)
    if r.header.concurrency is not None:
        raise SystemExit(f"{path}: a closed-loop trace (concurrency {r.header.concurrency}); "
                         "live_admission sets the load by the arrival rate: give an open-loop trace")
    starts: dict[str, float] = {}
    for c in r:
        if c.workflow not in starts and c.timestamp is not None:
            starts[c.workflow] = c.timestamp
    t = sorted(starts.values())
    if len(t) < 2 or t[-1] <= t[0]:
        raise SystemExit(f"{path}: needs two or more workflows starting at different timestamps")
    return (len(t) - 1) / ((t[-1] - t[0]) / 1000.0)


class Bench:
    """The live and simulated runs of one trace, on one engine."""

    def __init__(self, a, trace: Path, preset: Path, work: Path) -> None:
        self.a, self.trace, self.preset, self.work = a, trace, preset, work
        self.rate0 = trace_rate(trace)
        self.n = 0
        # the simulator's pool is the live one: the preset's unless --vllm-blocks names another
        # (vLLM keeps one block back, as the preset's kv_tokens do)
        engine = json.loads(preset.read_text()).get("engine", {})
        self.sim_blocks = None if engine.get("num_blocks") == a.vllm_blocks else a.vllm_blocks - 1

    def options(self, rate: float, scheduler: str, baseline: str, log_dir: Path):
        from agentrt.enginebench.runner import EngineBenchOptions
        a = self.a
        return EngineBenchOptions(model_size=a.model_size, vllm_blocks=a.vllm_blocks, scale=a.scale,
                                  think_scale=a.think_scale, time_scale=self.rate0 / rate, seed=a.seed,
                                  train_fraction=0.0, log_dir=str(log_dir), scheduler=scheduler,
                                  baseline=baseline, preset_file=str(self.preset))

    def live(self, pairs: list[str], rate: float) -> dict[str, dict]:
        """One run of each pair at `rate`: {pair: the engine bench's result, with `sim_*`}."""
        from agentrt.bench.source import file_source
        from agentrt.enginebench.runner import run_engine_bench
        groups: dict[str, list[str]] = {}
        for p in pairs:
            groups.setdefault(PAIRS[p][1], []).append(p)
        out: dict[str, dict] = {}
        for sched, names in groups.items():
            self.n += 1
            log_dir = self.work / f"run{self.n:03d}-{sched}-{rate:.4f}"
            policies = [PAIRS[p][0] for p in names if p != "stock"]
            baseline = "stock" if "stock" in names else "none"
            src = file_source(self.trace)
            t0 = time.time()
            try:
                doc = run_engine_bench(src, policies, self.options(rate, sched, baseline, log_dir),
                                       log=lambda m: print("   ", m, flush=True))
            finally:
                src.close()
            for p in names:
                pol = PAIRS[p][0]
                label = "stock" if p == "stock" else pol if sched == "fcfs" else f"{pol}+{sched}"
                r = doc["results"][label]
                sim = self.sim(log_dir / "replayed-engine.jsonl", "lru" if p == "stock" else pol, sched, rate)
                out[p] = {**{k: r.get(k) for k in FIGURES}, "errors": r["errors"], "calls": r["calls"],
                          "gate": r.get("gate"), "rate": rate,
                          **{f"sim_{k}": sim.get(k) for k in FIGURES}}
            print(f"  {rate:.4f}/s {sched}: " + ", ".join(
                f"{p} E2E {out[p]['e2e_mean_s']:.1f}s p90 TTFT {out[p]['ttft_p90_s']:.2f}s" for p in names)
                + f" ({time.time() - t0:.0f} s)", flush=True)
        return out

    def sim(self, engine_trace: Path, policy: str, scheduler: str, rate: float) -> dict:
        from agentrt.enginebench.fidelity import sim_run
        if not engine_trace.exists():
            return {}
        doc = sim_run(engine_trace, self.preset, [policy], scheduler, None, self.rate0 / rate, self.a.seed,
                      self.sim_blocks)
        return doc["results"].get(policy, {})


class SimOnlyBench(Bench):
    """The same method with the simulator standing in for every live run (`--sim-only`): the
    calls as the engine would be sent them, on the preset, in seconds. A screen for where the
    live runs are worth their hour (where the simulator predicts stock vLLM past its knee), not a
    result: the figures it writes are the simulator's, under both the live and the `sim_` keys."""

    def __init__(self, a, trace: Path, preset: Path, work: Path) -> None:
        super().__init__(a, trace, preset, work)
        from agentrt.bench.source import file_source
        from agentrt.enginebench.runner import write_engine_trace
        from agentrt.local.model import build_model, default_model_dir, model_info
        vocab = model_info(build_model(default_model_dir(a.model_size), a.model_size))["vocab"]
        opts = self.options(self.rate0, "fcfs", "stock", work)
        src = file_source(trace)
        try:
            self.engine_trace = work / "replayed-engine.jsonl"
            write_engine_trace(self.engine_trace, src.header, list(src.eval_calls()), vocab, opts)
        finally:
            src.close()
        if not self.engine_trace.exists():
            raise SystemExit(f"{trace}: its blocks do not align with the engine's; nothing to simulate")

    def live(self, pairs: list[str], rate: float) -> dict[str, dict]:
        out: dict[str, dict] = {}
        for p in pairs:
            pol, sched = PAIRS[p]
            sim = self.sim(self.engine_trace, "lru" if p == "stock" else pol, sched, rate)
            out[p] = {**{k: sim.get(k) for k in FIGURES}, "errors": 0, "calls": sim.get("calls"),
                      "gate": None, "rate": rate, **{f"sim_{k}": sim.get(k) for k in FIGURES}}
        print(f"  {rate:.4f}/s (simulated): " + ", ".join(
            f"{p} E2E {out[p]['e2e_mean_s']:.1f}s p90 TTFT {out[p]['ttft_p90_s']:.2f}s" for p in pairs), flush=True)
        return out


def bisect(probe, known: list[tuple[float, float]], start: float, slo: float, expand: int,
           steps: int) -> tuple[float, float | None, list]:
    """The highest rate whose p90 TTFT (`probe(rate)`) is within `slo`: from the `known` (rate,
    p90) points (probing `start` when there are none), doubling or halving up to `expand` times
    until the SLO is crossed, then `steps` geometric bisection steps. (rate, the lowest rate
    seen past it or None, every point)."""
    points = list(known)

    def bracket():
        ok = [r for r, p in points if p is not None and p <= slo]
        lo = max(ok) if ok else 0.0
        above = [r for r, p in points if r > lo and (p is None or p > slo)]
        return lo, (min(above) if above else None)

    if not points:
        points.append((start, probe(start)))
    for _ in range(expand):
        lo, hi = bracket()
        if lo and hi:
            break
        r = lo * 2 if lo else min(r for r, _ in points) / 2
        points.append((r, probe(r)))
    for _ in range(steps):
        lo, hi = bracket()
        if not lo or hi is None:
            break
        mid = math.sqrt(lo * hi)
        points.append((mid, probe(mid)))
    lo, hi = bracket()
    return lo, hi, sorted(points)


def slo_of(a, preset: Path, trace: Path) -> float:
    """`--slo`, else `--slo-factor` x the preset's time for the trace's p90 prompt alone."""
    if a.slo:
        return a.slo
    from agentrt.engine.costs import CostModel
    from agentrt.engine.preset_file import load_preset_file
    from agentrt.trace.reader import TraceReader
    pf = load_preset_file(preset)
    r = TraceReader(trace)
    tokens = sorted(c.input_length * a.scale for c in r)
    p90 = int(tokens[min(len(tokens) - 1, int(0.9 * len(tokens)))])
    return a.slo_factor * (CostModel(pf.preset).prefill(p90, 0) + pf.request_overhead_s)


def run(a) -> dict:
    t0 = time.time()
    work, preset = work_and_preset(a, "live-admission", "--model-size", a.model_size)
    if a.trace:
        trace, source = Path(a.trace), f"--trace {a.trace}"
    else:
        trace = work / f"{a.workload}.jsonl"
        agentrt("generate", a.workload, "--workflows", str(a.workflows), "--seed", str(a.seed),
                "--rate", "1", "-o", str(trace))
        source = f"--workload {a.workload} --workflows {a.workflows} --seed {a.seed}"
    bench = (SimOnlyBench if a.sim_only else Bench)(a, trace, preset, work)
    slo = slo_of(a, preset, trace)
    pairs = a.pairs.split(",")
    print(f"trace rate {bench.rate0:.4f} workflows/s; SLO p90 TTFT {slo:.3f} s", flush=True)

    def stock_p90(rate: float) -> float | None:
        return bench.live(["stock"], rate)["stock"]["ttft_p90_s"]

    loads = [float(x) for x in a.loads.split(",")]
    if a.rate and not a.expand and not a.bisect:
        rate, probes = a.rate, []            # taken as given: nothing searched (the smoke run)
    else:
        rate, _, probes = bisect(stock_p90, [], a.rate or bench.rate0, slo, a.expand, a.bisect)
    if not rate:
        raise SystemExit(f"stock vLLM is past the SLO at every rate tried: {probes}")
    print(f"sustainable rate {rate:.4f} workflows/s", flush=True)
    doc: dict = {"sustainable_rate": rate, "slo_ttft_p90_s": slo, "loads": {}, "runs": {}}
    for load in loads:
        rows: dict[str, list] = {p: [] for p in pairs}
        for _ in range(a.runs):
            for p, r in bench.live(pairs, rate * load).items():
                rows[p].append(r)
        doc["runs"][f"{load:g}"] = rows
        doc["loads"][f"{load:g}"] = {p: summarise(rs) for p, rs in rows.items()}
    goodput, steps = {}, {}
    for p in pairs:        # stock: its search's probes and the loads' medians, nothing more to run
        known = [(rate * load, doc["loads"][f"{load:g}"][p].get("ttft_p90_s")) for load in loads]
        n = 0 if p == "stock" else a.goodput_steps
        goodput[p], _, steps[p] = bisect(lambda r, p=p: bench.live([p], r)[p]["ttft_p90_s"],
                                         known + (probes if p == "stock" else []), rate, slo, n, n)
    doc["goodput"], doc["goodput_points"], doc["bisection"] = goodput, steps, probes
    doc["criteria"] = criteria(doc)
    doc["settings"] = {"source": source, "pairs": pairs, "runs": a.runs, "loads": loads,
                       "rate_searched": bool(probes), "slo_given": a.slo, "model_size": a.model_size,
                       "vllm_blocks": a.vllm_blocks, "scale": a.scale, "think_scale": a.think_scale,
                       "seed": a.seed, "trace_rate": bench.rate0, "sim_only": a.sim_only, "preset": json.loads(preset.read_text()),
                       "command": "python -m benchmarks.live_admission " + " ".join(sys.argv[1:]),
                       "seconds": round(time.time() - t0), "live_runs": bench.n}
    return doc


SMOKE = dict(workload="team", workflows=4, runs=1, bisect=0, expand=0, goodput_steps=0, rate=0.5,
             loads="1.2", slo=600.0, vllm_blocks=64, scale=0.125, think_scale=0.05, pairs="stock,las+lru")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, checked, with --smoke's and --sim-only's settings applied."""
    ap = argparse.ArgumentParser(prog="python -m benchmarks.live_admission", description=__doc__.split("\n")[0])
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--trace", help="an open-loop trace file (workflows start at their timestamps)")
    src.add_argument("--workload", default="team")
    ap.add_argument("--workflows", type=int, default=24)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--pairs", default=",".join(PAIRS), help=f"comma-separated, of {', '.join(PAIRS)}")
    ap.add_argument("--rate", type=float, default=None, help="first rate to try (default: the trace's own); "
                    "with --expand 0 --bisect 0 it is taken as the sustainable rate, unmeasured")
    ap.add_argument("--loads", default="0.8,1.2", help="multiples of the sustainable rate to replay at")
    ap.add_argument("--slo", type=float, default=None, help="p90 TTFT SLO, seconds (default: see --slo-factor)")
    ap.add_argument("--slo-factor", type=float, default=5.0,
                    help="SLO = this x the preset's time for the trace's p90 prompt alone")
    ap.add_argument("--expand", type=int, default=4, help="doublings or halvings to cross the SLO")
    ap.add_argument("--bisect", type=int, default=4, help="bisection steps for the sustainable rate")
    ap.add_argument("--goodput-steps", type=int, default=2, help="probes per pair for its goodput")
    ap.add_argument("--model-size", default="tiny")
    ap.add_argument("--vllm-blocks", type=int, default=256)
    ap.add_argument("--scale", type=float, default=0.125)
    ap.add_argument("--think-scale", type=float, default=0.25)
    ap.add_argument("--preset-file", default=None, help="a preset from agentrt calibrate (default: measure one)")
    ap.add_argument("--work-dir", default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--smoke", action="store_true", help="the CI version: " + ", ".join(
        f"{k}={v}" for k, v in SMOKE.items()))
    ap.add_argument("--sim-only", action="store_true", help="the simulator in place of every live run, on the "
                    "preset (a screen for where stock vLLM passes its knee; written only where --json says)")
    ap.add_argument("--docs", action="store_true", help="re-render docs/notes/results-details.md from the stored JSONs")
    a = ap.parse_args(argv)
    if a.smoke:
        for k, v in SMOKE.items():
            setattr(a, k, v)
    if a.sim_only:
        a.runs = 1              # the simulator is deterministic: a second run repeats the first
        if not a.json:
            raise SystemExit("--sim-only: give --json OUT (the simulator's screen is not a live result "
                             "and is not written among the docs' live-admission JSONs)")
    bad = [p for p in a.pairs.split(",") if p not in PAIRS]
    if bad or "stock" not in a.pairs.split(","):
        raise SystemExit(f"--pairs: unknown {bad} (of {', '.join(PAIRS)}; stock is required)")
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    if a.docs:
        write_docs()
        return 0
    doc = run(a)
    name = Path(a.trace).stem if a.trace else a.workload
    out = Path(a.json or RESULTS / f"live-admission-{name}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1))
    print(markdown({name: doc}))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

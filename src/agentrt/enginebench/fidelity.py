"""The simulator against the live engine on the same calls: does the calibrated model predict it?

Model: `runs` live replays (`agentrt bench --engine vllm`, `enginebench/runner.py`) of one trace
per policy, then one simulator replay of exactly the calls the engine was sent (the run's
`replayed-engine.jsonl`: lengths as sent, one hash id per engine block, `trace/reblock.py`) on
a preset measured on that engine (`agentrt calibrate`: its costs, KV pool, scheduler limits and
caching point), with the same concurrency, think times and policies. Per policy (and scheduler,
keyed `SCHEDULER+POLICY` when one is given): the live medians and ranges over runs and the
simulator's value of hit rate, mean and p90 TTFT, mean workflow E2E, mean TPOT, makespan and
the engine's time in iterations (`busy_s`: live, from vLLM's iteration log when the runs had
`--engine-iterations`; it splits a latency gap between the cost model's compute and the time
between iterations, which the simulator does not model); `*_ratio` is sim / live median. Live runs use live answers (later prompts carry the engine's own tokens), so output
blocks are reused live as in the simulator.
The machine drifts (a shared host: two calibrations hours apart moved the same replay's predicted
TTFT by 15-20%), so `benchmarks/fidelity.py` calibrates before and after the live runs
and `bracket` keeps both simulations: each simulator figure is the mean of the two, beside them
(`sim_*_before`, `sim_*_after`), so a live figure between the two is inside the drift.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

FIGURES = (("hit", "hit_rate"), ("ttft_mean_s", "ttft_mean_s"), ("ttft_p90_s", "ttft_p90_s"),
           ("e2e_mean_s", "e2e_mean_s"), ("tpot_mean_s", "tpot_mean_s"), ("makespan_s", "makespan_s"),
           ("busy_s", "busy_s"), ("inflight_s", "inflight_s"))


def label(policy: str, scheduler: str) -> str:
    return policy if scheduler == "fcfs" else f"{scheduler}+{policy}"


def live_label(policy: str, scheduler: str) -> str:
    """The engine bench's own label for a run (`runner.plan_runs`)."""
    return policy if scheduler == "fcfs" else f"{policy}+{scheduler}"


def live_runs(source_factory: Callable, policies: list[str], opts, runs: int, log_root: Path,
              say: Callable[[str], None] = print) -> list[dict]:
    """`runs` engine-bench documents, each with its own log folder (run_i/)."""
    from agentrt.enginebench.runner import run_engine_bench
    docs = []
    for i in range(runs):
        d = log_root / f"run{i}"
        source = source_factory()
        try:
            docs.append(run_engine_bench(source, policies, replace(opts, log_dir=str(d)), log=say))
        finally:
            source.close()
        say(f"live run {i + 1}/{runs} done")
    return docs


def sim_run(engine_trace: Path, preset_file: Path, policies: list[str], scheduler: str,
            concurrency: int | None, time_scale: float, seed: int, gpu_blocks: int | None = None) -> dict:
    """One simulator replay of the calls the engine was sent, on the measured preset (its pool,
    unless `gpu_blocks` names another)."""
    from agentrt.bench.cli_spec import bench_spec
    from agentrt import defaults
    spec = bench_spec(trace=engine_trace, workload=None, policies=",".join(policies), engine="sim",
                      gpu_blocks=gpu_blocks, host_blocks=0, preset=defaults.PRESET, preset_file=preset_file,
                      seed=seed, workflows=defaults.WORKFLOWS, concurrency=concurrency, tool_scale=1.0,
                      time_scale=time_scale, json_path=None, csv_path=None, plot=None, train=None,
                      train_fraction=0.0, predictor=None, predictor_kind="graphsage",
                      predictor_noise=0.0, set_=[], scheduler=scheduler, max_wait=None, max_hold=None,
                      tenant_weights=None)
    return spec.run()


def compare(live_docs: list[dict], sim_doc: dict, policies: list[str], scheduler: str) -> dict:
    """{"policies": {label: figures}}: live medians and ranges, simulator values, ratios."""
    out: dict = {}
    for p in policies:
        lab = live_label(p, scheduler)
        rows = [d["results"][lab] for d in live_docs if lab in d["results"]]
        sim = sim_doc["results"].get(p)
        if not rows or sim is None:
            continue
        f: dict = {"runs": len(rows)}
        for short, key in FIGURES:
            vals = [r[key] for r in rows if r.get(key) is not None]
            if not vals:
                continue
            med = statistics.median(vals)
            f[f"live_{short}"] = med
            f[f"live_{short}_range"] = [min(vals), max(vals)]
            f[f"sim_{short}"] = sim.get(key)
            if sim.get(key) is not None and med:
                f[f"{short}_ratio"] = sim[key] / med
        f["output_blocks_live"] = statistics.median(r.get("output_blocks_live") or 0 for r in rows)
        phases = [r["engine_phases"] for r in rows if r.get("engine_phases")]
        if phases:       # vLLM's own per-request means, median over the runs
            f["live_phases"] = {k: statistics.median(v) if (v := [ph[k] for ph in phases if ph.get(k) is not None])
                                else None for k in phases[0]}
            f["ttft_split"] = ttft_split(f, sim)
        stalls = [r["token_stalls"] for r in rows if r.get("token_stalls")]
        if stalls:       # the client's slow token gaps against vLLM's, median over the runs
            f["live_token_stalls"] = {k: statistics.median(ts[k] for ts in stalls) for k in stalls[0]}
        out[label(p, scheduler)] = f
    return {"policies": out}


def bracket(before: dict, after: dict) -> dict:
    """`compare`'s document for the preset calibrated before the live runs, with the one
    calibrated after: each simulator figure becomes the mean of the two (ratios recomputed), the
    two kept as `sim_X_before` / `sim_X_after`; live figures are the same in both."""
    out = {"policies": {}}
    for lab, f in before["policies"].items():
        g = after["policies"].get(lab)
        f = dict(f)
        if g is not None:
            for short, _ in FIGURES:
                a, b = f.get(f"sim_{short}"), g.get(f"sim_{short}")
                if a is None or b is None:
                    continue
                f[f"sim_{short}_before"], f[f"sim_{short}_after"] = a, b
                f[f"sim_{short}"] = m = (a + b) / 2
                live = f.get(f"live_{short}")
                if live:
                    f[f"{short}_ratio"] = m / live
            if f.get("ttft_split") and g.get("ttft_split"):
                f["ttft_split"] = {k: (v + g["ttft_split"][k]) / 2 if k.startswith("sim_") else v
                                   for k, v in f["ttft_split"].items()}
        out["policies"][lab] = f
    return out


def ttft_split(f: dict, sim: dict) -> dict | None:
    """Mean TTFT cut where the engine first schedules a call, live and simulated (seconds):
    `to_scheduled` is the client's TTFT less vLLM's prefill phase live (the API server both ways,
    the wait for the running iteration to end, vLLM's queue) and the simulator's wait for
    admission (its request-path delay, the wait for an iteration, its queue);
    `scheduled_to_first` is vLLM's prefill phase (scheduled to first token, engine-core
    timestamps) and the simulator's TTFT less its wait. None without both sides' figures."""
    prefill, live, wait = f.get("live_phases", {}).get("prefill"), f.get("live_ttft_mean_s"), sim.get("wait_mean_s")
    if prefill is None or live is None or wait is None or sim.get("ttft_mean_s") is None:
        return None
    return {"live_to_scheduled_s": live - prefill, "sim_to_scheduled_s": wait,
            "live_scheduled_to_first_s": prefill, "sim_scheduled_to_first_s": sim["ttft_mean_s"] - wait}


def separated(a: dict, b: dict) -> bool:
    """Whether two policies' live hit-rate ranges do not overlap (the runs separate them)."""
    (lo1, hi1), (lo2, hi2) = a["live_hit_range"], b["live_hit_range"]
    return hi1 < lo2 or hi2 < lo1


def order_agrees(policies: dict) -> list[str]:
    """Pairs the live runs separate whose order the simulator gets wrong (empty: all agree)."""
    names, bad = list(policies), []
    for i, x in enumerate(names):
        for y in names[i + 1:]:
            a, b = policies[x], policies[y]
            if separated(a, b) and (a["live_hit"] - b["live_hit"]) * (a["sim_hit"] - b["sim_hit"]) < 0:
                bad.append(f"{x} vs {y}")
    return bad

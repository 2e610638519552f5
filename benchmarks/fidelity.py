"""The calibrated simulator against the live engine, on the same calls, per policy.

    python -m benchmarks.fidelity --workload team --seed 0 --runs 3 --json docs/results/engine/fidelity-team.json
    python -m benchmarks.fidelity --trace out/ag2.jsonl --runs 3 --json docs/results/engine/fidelity-ag2.json
    python -m benchmarks.fidelity --docs-only          # re-render docs/notes/results-details.md from the stored JSONs
    python -m benchmarks.fidelity ... --work-dir DIR --resimulate --preset-file P   # new preset, same live runs

Calibrates the local vLLM first (`agentrt calibrate`, about 2 minutes) unless `--preset-file` is
given, then runs `agentrt bench --engine vllm` `--runs` times (live answers on; stock vLLM
always first), calibrates again (the machine drifts; `--no-calibrate-after` skips it,
`--preset-after` gives the second preset) and runs `agentrt bench --preset-file` on the calls
the first live run sent (`replayed-engine.jsonl`) with each preset (each simulator figure is the
mean of the two, both kept: `agentrt.enginebench.fidelity.bracket`), and writes `agentrt.enginebench.fidelity.compare`'s JSON:
{"policies": {"lru": {"live_hit", "sim_hit", "live_ttft_mean_s", "sim_ttft_mean_s",
"live_e2e_mean_s", "sim_e2e_mean_s", ... ranges and ratios}}, "settings": ...}. The table
between the `fidelity` markers of docs/notes/results-details.md shows every stored fidelity-*.json.
`--resimulate` keeps the live runs already in `--work-dir` (live0.json ... and run0's calls) and
runs only the simulator (another preset or cost model on the same live measurements).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from agentrt.enginebench.fidelity import bracket, compare, order_agrees

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "docs" / "results" / "engine"
DOCS = REPO / "docs" / "notes" / "results-details.md"
START, END = "<!-- fidelity:start -->", "<!-- fidelity:end -->"


def agentrt(*args: str) -> None:
    cmd = [sys.executable, "-m", "agentrt.cli", *args]
    print("  $ agentrt", " ".join(args), flush=True)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def source_args(a) -> list[str]:
    if a.trace:
        return ["--trace", a.trace]
    return ["--workload", a.workload, "--seed", str(a.seed), "--workflows", str(a.workflows)]


def work_and_preset(a, name: str, *calibrate: str) -> tuple[Path, Path]:
    """The work folder (`--work-dir`, else a new temporary one) and the preset: `--preset-file`,
    else `agentrt calibrate --engine vllm --vllm-blocks N` (plus `calibrate`) run into the folder."""
    work = Path(a.work_dir or tempfile.mkdtemp(prefix=f"agentrt-{name}-"))
    work.mkdir(parents=True, exist_ok=True)
    preset = Path(a.preset_file) if a.preset_file else work / "preset.json"
    if not a.preset_file:
        calibrate_into(a, preset, *calibrate)
    return work, preset


def calibrate_into(a, out: Path, *calibrate: str) -> None:
    """`agentrt calibrate --engine vllm --vllm-blocks N` (plus `calibrate`) into `out`."""
    agentrt("calibrate", "--engine", "vllm", *calibrate, "--vllm-blocks", str(a.vllm_blocks), "-o", str(out))


def own_priority(a) -> list[str]:
    """`--vllm-own-priority` when asked for (calibrate and the live runs take the same flag)."""
    return ["--vllm-own-priority"] if a.vllm_own_priority else []


def preset_after(a, work: Path) -> Path | None:
    """The preset calibrated after the live runs: measured now when this run calibrated before
    them (no `--preset-file`, no `--resimulate`, no `--no-calibrate-after`), else
    `--preset-after`, else none (the simulator figures are then the one preset's)."""
    if a.preset_after:
        return Path(a.preset_after)
    if a.preset_file or a.resimulate or a.no_calibrate_after:
        return None
    out = work / "preset-after.json"
    calibrate_into(a, out, *own_priority(a))
    return out


def run(a) -> dict:
    t0 = time.time()
    work, preset = work_and_preset(a, "fidelity", *own_priority(a))
    live_args = ["bench", *source_args(a), "--engine", "vllm", "--policies", a.policies, "--vllm-blocks", str(a.vllm_blocks),
                 "--scale", str(a.scale), "--think-scale", str(a.think_scale), "--train-fraction", "0",
                 "--scheduler", a.scheduler, "--quiet"]
    if a.concurrency:
        live_args += ["--concurrency", str(a.concurrency)]
    if a.max_calls:
        live_args += ["--max-calls", str(a.max_calls)]
    if a.engine_iterations:
        live_args += ["--engine-iterations"]
    live_args += own_priority(a)
    if a.vllm_integration != "connector":
        live_args += ["--vllm-integration", a.vllm_integration]
    live = []
    for i in range(a.runs):
        out = work / f"live{i}.json"
        if a.resimulate:
            if not out.is_file():
                raise SystemExit(f"--resimulate: {out} is missing (the live runs of --work-dir {work})")
        else:
            agentrt(*live_args, "--json", str(out), "--log-dir", str(work / f"run{i}"))
        live.append(json.loads(out.read_text()))
    after = preset_after(a, work)
    engine_trace = work / "run0" / "replayed-engine.jsonl"
    conc = live[0]["config"]["concurrency"]

    def simulate(p: Path, name: str) -> dict:
        out = work / (f"sim-{p.stem}.json" if a.resimulate else name)
        # the live pool: vLLM's blocks less its null block, in the engine trace's blocks (the same size)
        args = ["bench", "--trace", str(engine_trace), "--preset-file", str(p), "--policies", a.policies,
                "--gpu-blocks", str(a.vllm_blocks - 1), "--scheduler", a.scheduler, "--train-fraction", "0",
                "--quiet", "--json", str(out)]
        agentrt(*args, *(["--concurrency", str(conc)] if conc else []))
        return json.loads(out.read_text())

    names = a.policies.split(",")
    doc = compare(live, simulate(preset, "sim.json"), names, a.scheduler)
    if after is not None:
        doc = bracket(doc, compare(live, simulate(after, "sim-after.json"), names, a.scheduler))
    doc["order_disagreements"] = order_agrees(doc["policies"])
    doc["settings"] = {"source": " ".join(source_args(a)), "runs": a.runs, "policies": names,
                       "scheduler": a.scheduler, "vllm_blocks": a.vllm_blocks, "scale": a.scale,
                       "think_scale": a.think_scale, "concurrency": conc, "calls": live[0]["calls"],
                       "vllm_integration": live[0]["config"].get("integration", "connector"),
                       "preset": json.loads(preset.read_text()),
                       "preset_after": json.loads(after.read_text()) if after is not None else None,
                       "command": "python -m benchmarks.fidelity " + " ".join(sys.argv[1:]),
                       "live_runs_from": str(work) if a.resimulate else None,
                       "seconds": round(time.time() - t0)}
    return doc


def pct(x) -> str:
    return "" if x is None else f"{100 * x:.1f}"


def rng(r, scale=1.0, digits=2) -> str:
    return f"{r[0] * scale:.{digits}f}-{r[1] * scale:.{digits}f}"


def markdown(docs: dict[str, dict]) -> str:
    lines = ["| trace | policy | live hit % (range) | sim hit % | live TTFT mean s (range) | sim | "
             "live TTFT p90 s | sim | live E2E mean s (range) | sim | output blocks reused live |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    def sim(f: dict, short: str, digits: int) -> str:
        """The simulator's figure, with the two calibrations' (before, after) where it has both."""
        v, b, a = f[f"sim_{short}"], f.get(f"sim_{short}_before"), f.get(f"sim_{short}_after")
        return f"{v:.{digits}f}" + (f" ({b:.{digits}f}, {a:.{digits}f})" if b is not None and a is not None else "")
    for name, d in docs.items():
        for pol, f in d["policies"].items():
            lines.append(
                f"| {name} | {pol} | {pct(f['live_hit'])} ({rng(f['live_hit_range'], 100, 1)}) | {pct(f['sim_hit'])} "
                f"| {f['live_ttft_mean_s']:.2f} ({rng(f['live_ttft_mean_s_range'])}) | {sim(f, 'ttft_mean_s', 2)} "
                f"| {f['live_ttft_p90_s']:.2f} | {f['sim_ttft_p90_s']:.2f} "
                f"| {f['live_e2e_mean_s']:.1f} ({rng(f['live_e2e_mean_s_range'], 1, 1)}) | {sim(f, 'e2e_mean_s', 1)} "
                f"| {f['output_blocks_live']:.0f} |")
    cmds = "; ".join(f"`{d['settings']['command']}`" for d in docs.values())
    return "\n".join(lines) + f"\n\nCommands: {cmds}." + where_time_goes(docs)


def where_time_goes(docs: dict[str, dict]) -> str:
    """The runs with vLLM's iteration log: the engine's time in iterations (its compute, which the
    preset models) against the time a call was in flight and the makespan, and mean TPOT. The
    simulator runs an iteration whenever a call is in flight (nothing is held or loading here),
    so its in-flight time is its busy time."""
    rows = [(name, pol, f) for name, d in docs.items() for pol, f in d["policies"].items()
            if f.get("live_busy_s") is not None]
    if not rows:
        return ""
    out = ["", "", "Where the time goes (runs with `--engine-iterations`; medians of the live runs): the "
           "engine's time in iterations (live: the sum of vLLM's logged iteration times; sim: the cost "
           "model's), the time at least one call was in flight (live: at the client), and what is left: "
           "time with a call in flight but no iteration running:", "",
           "| trace | policy | live busy s | sim busy s | live in flight s | live in flight, no iteration s "
           "| live makespan s | sim | live TPOT ms | sim |",
           "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, pol, f in rows:
        lb, fl = f["live_busy_s"], f.get("live_inflight_s")
        gap = "" if fl is None else f"{fl - lb:.1f}"
        out.append(f"| {name} | {pol} | {lb:.1f} | {f['sim_busy_s']:.1f} | {'' if fl is None else f'{fl:.1f}'} "
                   f"| {gap} | {f['live_makespan_s']:.1f} | {f['sim_makespan_s']:.1f} "
                   f"| {1000 * f['live_tpot_mean_s']:.1f} | {1000 * f['sim_tpot_mean_s']:.1f} |")
    return "\n".join(out) + inside_vllm(docs)


def inside_vllm(docs: dict[str, dict]) -> str:
    """Where a call's TTFT and TPOT go, from vLLM's own latency histograms (means per request):
    the client's TTFT against vLLM's (request in at its API server to first token out), its
    engine core's queue and prefill time, and the client's TTFT cut where the engine schedules
    the call, live and in the simulator (`ttft_split`); the client's TPOT against vLLM's
    inter-token latency."""
    rows = [(name, pol, f) for name, d in docs.items() for pol, f in d["policies"].items() if f.get("live_phases")]
    if not rows:
        return ""

    def ms(x, digits=0):
        return "" if x is None else f"{1000 * x:.{digits}f}"
    out = ["", "", "Inside vLLM (its latency histograms, mean per call, ms; medians of the live runs) against "
           "the client's measures and the simulator's:", "",
           "| trace | policy | client TTFT | vLLM TTFT | engine queue | engine prefill | to scheduled | sim TTFT "
           "| sim to scheduled | sim scheduled to first | client TPOT | vLLM inter-token | sim TPOT |",
           "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, pol, f in rows:
        ph = f["live_phases"]
        split = f.get("ttft_split") or {}
        out.append(f"| {name} | {pol} | {ms(f['live_ttft_mean_s'])} | {ms(ph.get('ttft'))} | {ms(ph.get('queue'))} "
                   f"| {ms(ph.get('prefill'))} | {ms(split.get('live_to_scheduled_s'))} | {ms(f['sim_ttft_mean_s'])} "
                   f"| {ms(split.get('sim_to_scheduled_s'))} | {ms(split.get('sim_scheduled_to_first_s'))} "
                   f"| {f['live_tpot_mean_s'] * 1000:.1f} | {ms(ph.get('inter_token'), 1)} "
                   f"| {f['sim_tpot_mean_s'] * 1000:.1f} |")
    return "\n".join(out) + stream_stalls(docs)


def stream_stalls(docs: dict[str, dict]) -> str:
    """Tokens that reached the client more than 100 ms after the previous one, against those
    vLLM's own inter-token histogram counts as that slow (`summary.token_stalls`)."""
    rows = [(name, pol, f) for name, d in docs.items() for pol, f in d["policies"].items()
            if f.get("live_token_stalls")]
    if not rows:
        return ""
    out = ["", "", "Stream stalls (medians of the live runs): output tokens that came more than "
           f"{1000 * rows[0][2]['live_token_stalls']['threshold_s']:.0f} ms after the previous one, at the client "
           "and in vLLM's inter-token histogram (timed by its engine core as each token is made), and the "
           "client's time in those waits:", "",
           "| trace | policy | token gaps | slow at the client | slow in vLLM | client time in them s | per call ms |",
           "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for name, pol, f in rows:
        ts = f["live_token_stalls"]
        calls = docs[name]["settings"].get("calls") or 0
        per = f"{1000 * ts['client_stalled_s'] / calls:.0f}" if calls else ""
        out.append(f"| {name} | {pol} | {ts['client_gaps']:.0f} | {ts['client_stalls']:.0f} | {ts['engine_stalls']:.0f} "
                   f"| {ts['client_stalled_s']:.1f} | {per} |")
    return "\n".join(out)


def write_docs() -> None:
    docs = {p.stem.removeprefix("fidelity-"): json.loads(p.read_text()) for p in sorted(RESULTS.glob("fidelity-*.json"))}
    text = DOCS.read_text()
    a, b = text.index(START) + len(START), text.index(END)
    DOCS.write_text(text[:a] + "\n" + markdown(docs) + "\n" + text[b:])
    print(f"updated {DOCS}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.fidelity", description=__doc__.split("\n")[0])
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--trace")
    src.add_argument("--workload", default="team")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workflows", type=int, default=24)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--policies", default="lru,cachesage,pbkv-ta")
    ap.add_argument("--scheduler", default="fcfs")
    ap.add_argument("--vllm-blocks", type=int, default=256)
    ap.add_argument("--scale", type=float, default=0.125)
    ap.add_argument("--think-scale", type=float, default=0.25)
    ap.add_argument("--concurrency", type=int, default=None)
    ap.add_argument("--max-calls", type=int, default=None)
    ap.add_argument("--preset-file", default=None, help="a preset from agentrt calibrate (default: measure one)")
    ap.add_argument("--preset-after", default=None,
                    help="a second preset, calibrated after the live runs: each simulator figure is the mean of "
                         "the two presets' (default: calibrate again after the live runs when this run calibrated)")
    ap.add_argument("--no-calibrate-after", action="store_true",
                    help="calibrate only before the live runs (one preset)")
    ap.add_argument("--engine-iterations", action="store_true",
                    help="vLLM logs every iteration: the JSON and docs split each run's time into the engine's "
                         "compute and the time between its iterations")
    ap.add_argument("--vllm-own-priority", action="store_true",
                    help="leave vLLM's engine core at its own CPU priority, in calibrate and every live run "
                         "(default: nice 19, agentrt.local.engine_nice)")
    ap.add_argument("--vllm-integration", choices=("connector", "scheduler"), default="connector",
                    help="how agentrt enters the live vLLM (bench --vllm-integration)")
    ap.add_argument("--work-dir", default=None)
    ap.add_argument("--resimulate", action="store_true",
                    help="reuse the live runs stored in --work-dir; run only the simulator")
    ap.add_argument("--json", default=None)
    ap.add_argument("--docs-only", action="store_true")
    a = ap.parse_args(argv)
    if a.docs_only:
        write_docs()
        return 0
    if a.resimulate and not (a.work_dir and a.preset_file):
        ap.error("--resimulate needs --work-dir (the live runs) and --preset-file")
    doc = run(a)
    out = Path(a.json or RESULTS / f"fidelity-{Path(a.trace).stem if a.trace else a.workload}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1))
    print(markdown({out.stem: doc}))
    if doc["order_disagreements"]:
        print("order disagreements:", ", ".join(doc["order_disagreements"]))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

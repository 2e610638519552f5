"""What configuring the agentrt connector costs a live vLLM, measured end to end against stock vLLM.

Model: the same timed trace (Mooncake format) is replayed by vLLM's own benchmark client
(`vllm_client.py`) against a fresh local server per variant and run, on the same model and KV
pool; only the `--kv-transfer-config` differs:
- `stock`: no connector (what a user runs without agentrt); `stock-again`: the same, an A/A
  control whose ratios to `stock` are the noise floor of the paired comparison;
- `noop`: a connector that does nothing (`agentrt.vllm.noop`), with vLLM's own rules for a
  configured connector: what vLLM's connector path costs by itself;
- `noop-stock-binding`: the same with the CPU reservation stock vLLM uses
  (`VLLM_CPU_NUM_OF_RESERVED_CPU` = the local ranks), separating the binding from the hooks;
- `POLICY`: AgentRTConnector with that policy (`lru`: nothing reordered; `pbkv-ta`: the full
  runtime), the plugin keeping stock vLLM's CPU binding (`vllm/cpu_binding.py`);
- `POLICY-vllm-binding`: the same with `"cpu_binding": "vllm"`, vLLM's extra reserved core
  (the connector as it was before the binding was kept);
- `POLICY-stats-every-step`: the same with `"stats_interval_s": 0`, a metrics report to vLLM's
  API server on every step where something changed (the connector as it was before the interval);
- `POLICY-scheduler`: agentrt in vLLM's scheduler class with that policy, no connector configured
  (`vllm/scheduler.py`), its metrics served on a port of their own (`metrics_port`).
Runs go round-robin over the variants (run 1 of every variant, then run 2, ...), so slow drift of
a shared machine spreads over all of them, and each round starts one variant later than the last
(`round_order`), so no variant always runs first. Per variant: the median and range over runs of the
client's throughput, mean TTFT, mean TPOT and mean end-to-end latency; what the engine did (its
prefix-cache hit rate over the run and its preemptions, from vLLM's /metrics before and after the
run: a variant that computes more prompt tokens pays for them in TTFT and throughput); the CPU
time each of vLLM's processes used over the run (API server, engine core, worker; and the time
they waited for a CPU: `local/proc_cpu.py`); and for agentrt its own cost from its metrics
(`agentrt_connector_hook_seconds_total` per step; vLLM's /metrics for the connector, the side
port in the scheduler class).
Assumptions: one engine at a time on the machine; a run's requests all complete (the client
raises otherwise).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from agentrt.enginebench import prom
from agentrt.local.engine_nice import descendants
from agentrt.local.proc_cpu import ENGINE_CORE, ROLES, WORKER, cpu_between, role, server_cpu
from agentrt.enginebench.vllm_client import TimedTrace, run_client

METRICS = ("request_throughput", "mean_ttft_s", "mean_tpot_ms", "median_tpot_ms", "mean_e2el_s", "duration")
HIGHER_IS_BETTER = {"request_throughput"}
CONNECTOR_METRICS = ("agentrt_connector_hook_seconds_total", "agentrt_connector_steps_total",
                     "agentrt_connector_reorder_seconds_total", "agentrt_connector_runtime_seconds_total")


@dataclass(slots=True)
class Variant:
    name: str
    kv: dict | None = None               # --kv-transfer-config (None: no connector)
    env: dict = field(default_factory=dict)
    scheduler_policy: str | None = None   # agentrt in vLLM's scheduler class with this policy

    @property
    def agentrt(self) -> bool:
        """agentrt's connector, whose metrics vLLM's /metrics exports."""
        return self.kv is not None and self.kv.get("kv_connector") == "AgentRTConnector"

    @property
    def runs_agentrt(self) -> bool:
        """agentrt runs in this engine, as its connector or in its scheduler (what `--check` judges)."""
        return self.agentrt or self.scheduler_policy is not None

    def server_args(self, metrics_port: int | None = None) -> list[str]:
        """vLLM's extra arguments: in the scheduler class, the class with its metrics on
        `metrics_port`; none otherwise."""
        if self.scheduler_policy is None:
            return []
        from agentrt.vllm.config import scheduler_args
        return scheduler_args(self.scheduler_policy, metrics_port=metrics_port)


def variant(name: str) -> Variant:
    """A variant by name: `stock`, `stock-again`, `noop`, `noop-stock-binding`, `POLICY`,
    `POLICY-vllm-binding`, `POLICY-stats-every-step` or `POLICY-scheduler` (agentrt in vLLM's
    scheduler, no connector: `vllm/scheduler.py`)."""
    from agentrt.vllm.config import kv_transfer_config, scheduler_args
    from agentrt.vllm.noop import NOOP_CONFIG
    if name in ("stock", "stock-again"):
        return Variant(name)
    if name.endswith("-scheduler"):
        policy = name.removesuffix("-scheduler")
        scheduler_args(policy)               # a bad name fails here
        return Variant(name, scheduler_policy=policy)
    if name == "noop":
        return Variant(name, dict(NOOP_CONFIG))
    if name == "noop-stock-binding":
        return Variant(name, dict(NOOP_CONFIG), {"VLLM_CPU_NUM_OF_RESERVED_CPU": str(stock_reservation())})
    extra: dict = {}
    policy = name
    for suffix, setting in (("-vllm-binding", {"cpu_binding": "vllm"}), ("-stats-every-step", {"stats_interval_s": 0})):
        if policy.endswith(suffix):
            policy = policy.removesuffix(suffix)
            extra.update(setting)
    return Variant(name, kv_transfer_config(policy, **extra))


def stock_reservation(local_ranks: int = 1) -> int:
    """The cores stock vLLM 0.32 reserves on the CPU for one engine: one per local rank on x86,
    Arm and RISC-V, else one (`vllm/utils/ompmultiprocessing.py`)."""
    import platform
    arch = platform.machine().lower()
    per_rank = arch in ("x86_64", "amd64", "i386", "i686", "aarch64", "arm64", "riscv64")
    return local_ranks if per_rank else 1


@dataclass(slots=True)
class Load:
    name: str                 # e.g. "loaded", "unloaded"
    sec_multiplier: float     # the client's time factor (0.001: the trace's own speed)
    blocks: int               # the KV pool (--num-gpu-blocks-override)
    requests: int = 200       # the trace's first lines replayed


def engine_counters(base_url: str) -> dict[str, float]:
    """vLLM's own counters (prefix-cache queries and hits, prompt tokens, preemptions)."""
    return prom.scrape_now(base_url)


def engine_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float | None]:
    """A run's prefix-cache hit rate (tokens), prompt tokens and preemptions from two scrapes."""
    d = prom.delta(after, before)
    q = d[prom.QUERIES]
    return {"prefix_hit_rate": d[prom.HITS] / q if q > 0 else None, "prefix_queries": q,
            "prompt_tokens": d[prom.PROMPT], "preemptions": d[prom.PREEMPTIONS]}


def connector_cost(base_url: str) -> dict[str, float]:
    """The agentrt connector's own counters from vLLM's /metrics (zeros without the connector)."""
    return prom.scrape_now(base_url, CONNECTOR_METRICS)


# where a vLLM process spends its samples (py-spy stacks), by the frames they contain: the engine
# core (the scheduler; `PROFILE_KINDS`) or the worker (the model runner; `WORKER_KINDS`)
PROFILE_KINDS = {
    "waiting for the worker": ("dequeue (vllm", "acquire_read (vllm"),
    "vLLM scheduler: schedule": ("schedule (vllm/v1/core/sched/scheduler.py",),
    "vLLM scheduler: update_from_output": ("update_from_output (vllm/v1/core/sched/scheduler.py",),
    "vLLM connector path": ("kv_connector", "KVOutputAggregator"),
    "agentrt": ("agentrt/",),
    "engine I/O threads": ("process_input_sockets", "process_output_sockets"),
}
CONNECTOR_FRAMES = ("kv_connector", "kv_transfer", "agentrt/")


def connector_own(stack: str) -> bool:
    """The sample is in the connector path itself: from its first connector frame down, every
    frame is the connector's (vLLM wraps each attention layer for a connector, so a sample in the
    attention it wraps has a connector frame above it and is not the connector's cost)."""
    frames = stack.split(";")
    first = next((i for i, f in enumerate(frames) if any(m in f for m in CONNECTOR_FRAMES)), None)
    return first is not None and all(any(m in f for m in CONNECTOR_FRAMES) for f in frames[first:])


WORKER_KINDS = {
    "waiting for the engine core": ("dequeue (vllm", "acquire_read (vllm"),
    "execute_model": ("execute_model (vllm",),
    "model forward": ("forward (vllm/model_executor",),
    "sampling": ("sample (vllm/v1/sample",),
    "vLLM connector path": connector_own,
    "agentrt": ("agentrt/",),
}
PROCESS_ROLES = {"engine": ENGINE_CORE, "worker": WORKER}


def profile_breakdown(folded: str, kinds: dict = PROFILE_KINDS) -> dict:
    """Share of py-spy's samples (folded stacks, `stack count` lines) whose stack holds each kind
    (frames containing one of its marks, or a test of the whole stack)."""
    total, counts = 0, {k: 0 for k in kinds}
    for line in folded.splitlines():
        stack, _, n = line.rpartition(" ")
        if not n.isdigit():
            continue
        total += int(n)
        for kind, marks in kinds.items():
            if marks(stack) if callable(marks) else any(m in stack for m in marks):
                counts[kind] += int(n)
    return {"samples": total, **{k: v / total if total else 0.0 for k, v in counts.items()}}


def _profiler(pid: int, seconds: float, out: Path):
    """py-spy sampling the engine core (all threads, 200 Hz) for `seconds`; None without py-spy."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path
    beside = Path(sys.executable).with_name("py-spy")       # a virtual environment's, not on PATH
    spy = str(beside) if beside.exists() else shutil.which("py-spy")
    if spy is None:
        return None
    return subprocess.Popen([spy, "record", "-p", str(pid), "-d", str(int(seconds)), "-r", "200",
                             "-f", "raw", "-o", str(out), "--nonblocking"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _process_pid(server_pid: int, process_role: str) -> int | None:
    """The server's own process of that role (below `server_pid`: not another server's)."""
    return next((p for p in descendants(server_pid) if role(p) == process_role), None)


def run_once(v: Variant, load: Load, trace: TimedTrace, model_dir: str, log_dir: Path,
             run: int, block_size: int = 32, profile_s: float = 0.0, process: str = "engine") -> dict:
    """One server for `v`, one client run; the client's summary plus the connector's counters
    (and, with `profile_s`, py-spy's breakdown of `process`'s time over that window: the engine
    core or the worker)."""
    from agentrt.local.launch import VLLMServer, free_port
    tag = f"{load.name}-{v.name}-{run}"
    side_port = free_port() if v.scheduler_policy is not None else None
    srv = VLLMServer(model_dir, num_blocks=load.blocks, block_size=block_size, kv_connector=v.kv,
                     extra_env=v.env, extra_args=v.server_args(side_port),
                     log_path=str(log_dir / f"vllm-{tag}.log"), die_with_parent=True)
    srv.start()
    spy, folded = None, log_dir / f"profile-{tag}.txt"
    if profile_s > 0:
        pid = _process_pid(srv.proc.pid, PROCESS_ROLES[process])
        spy = _profiler(pid, profile_s, folded) if pid is not None else None
    try:
        before = engine_counters(srv.base_url)
        cpu0 = server_cpu(srv.proc.pid)
        res = run_client(srv.base_url, srv.served_name, model_dir, trace,
                         log_path=str(log_dir / f"client-{tag}.log"))
        res.update(cpu_between(cpu0, server_cpu(srv.proc.pid)))
        res["engine"] = engine_delta(before, engine_counters(srv.base_url))
        if spy is not None:
            spy.wait()
            kinds = WORKER_KINDS if process == "worker" else PROFILE_KINDS
            res["profile"] = profile_breakdown(folded.read_text(), kinds) if folded.exists() else None
            if res["profile"] is not None:
                res["profile"]["process"] = process
        if v.runs_agentrt:
            time.sleep(1.5)          # the connector reports its timing at least once a second
            c = connector_cost(srv.base_url if side_port is None else f"http://127.0.0.1:{side_port}")
            steps = c["agentrt_connector_steps_total"]
            res["connector"] = {
                "hook_s": c["agentrt_connector_hook_seconds_total"], "steps": steps,
                "reorder_s": c["agentrt_connector_reorder_seconds_total"],
                "runtime_s": c["agentrt_connector_runtime_seconds_total"],
                "hook_us_per_step": 1e6 * c["agentrt_connector_hook_seconds_total"] / steps if steps else None}
        res["startup_s"] = srv.startup_s
    finally:
        srv.stop()
    return res


def summarize(runs: list[dict]) -> dict:
    """Median and [min, max] of each compared figure over a variant's runs."""
    out: dict = {"runs": len(runs), "median": {}, "range": {}}
    figures = [(k, [r.get(k) for r in runs]) for k in METRICS]
    # what the engine did, not what it cost
    figures += [(k, [(r.get("engine") or {}).get(k) for r in runs]) for k in ("prefix_hit_rate", "preemptions")]
    # CPU seconds per vLLM process over the run (runs that read it)
    figures += [(f"cpu_{k}_s", [(r.get("cpu_s") or {}).get(k) for r in runs]) for k in ROLES]
    for k, vals in figures:
        vals = [v for v in vals if v is not None]
        if vals:
            out["median"][k] = statistics.median(vals)
            out["range"][k] = [min(vals), max(vals)]
    hooks = [r["connector"]["hook_us_per_step"] for r in runs
             if r.get("connector") and r["connector"]["hook_us_per_step"] is not None]
    if hooks:
        out["median"]["hook_us_per_step"] = statistics.median(hooks)
        shares = [r["connector"]["hook_s"] / r["duration"] for r in runs if r.get("connector")]
        out["median"]["hook_share_of_run"] = statistics.median(shares)
    return out


def versus_stock(summary: dict) -> dict:
    """Each variant's medians over stock's: the cost a user pays (> 1 worse for latencies,
    < 1 worse for throughput)."""
    base = summary["stock"]["median"]
    return {name: {k: s["median"][k] / base[k] for k in METRICS if base.get(k) and k in s["median"]}
            for name, s in summary.items() if name != "stock"}


def paired_versus_stock(raw: dict[str, list[dict]]) -> dict:
    """Each variant against stock round by round: the median over rounds of run i's figure over
    stock's run i. Runs go round-robin, so a round's runs are minutes apart and share the
    machine's drift (consecutive rounds of stock alone differ by up to 20% on a shared 2-core
    machine), which this cancels and `versus_stock` does not."""
    base = raw["stock"]
    out: dict = {}
    for name, runs in raw.items():
        if name == "stock":
            continue
        out[name] = {k: statistics.median(r[k] / b[k] for r, b in zip(runs, base))
                     for k in METRICS if all(r.get(k) and b.get(k) for r, b in zip(runs, base))}
    return out


def paired_of(res: dict) -> dict:
    """A stored load's round-by-round ratios (files written before they were stored have only
    the raw runs)."""
    return res.get("paired_vs_stock") or (paired_versus_stock(res["raw"]) if "stock" in res["raw"] else {})


NAMES = {"stock": "stock vLLM (no connector)",
         "stock-again": "stock vLLM again (A/A control: the runs' noise floor)",
         "noop": "do-nothing connector, vLLM's CPU binding",
         "noop-stock-binding": "do-nothing connector, stock's CPU binding",
         "lru-vllm-binding": "AgentRTConnector `lru`, vLLM's CPU binding (before)"}


def label(name: str) -> str:
    """A variant's name in tables."""
    if name.endswith("-scheduler"):
        return f"agentrt in vLLM's scheduler `{name.removesuffix('-scheduler')}` (no connector)"
    if name.endswith("-stats-every-step"):
        return f"AgentRTConnector `{name.removesuffix('-stats-every-step')}`, metrics every step (before)"
    return NAMES.get(name, f"AgentRTConnector `{name}`")


def loss(ratio: dict) -> float:
    """The largest relative loss against stock over throughput, mean TTFT and mean TPOT."""
    worst = 0.0
    for k in ("request_throughput", "mean_ttft_s", "mean_tpot_ms"):
        if k in ratio:
            worst = max(worst, 1.0 - ratio[k] if k in HIGHER_IS_BETTER else ratio[k] - 1.0)
    return worst


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def round_order(variants: list, run: int) -> list:
    """Round `run`'s order: the variants rotated by one place per round, so that no variant always
    runs first (on this machine a round's later runs are not exchangeable with its first: a fixed
    order put stock first in every round and charged any drift within a round to the others)."""
    k = run % len(variants) if variants else 0
    return variants[k:] + variants[:k]


def measure(variants: list[Variant], loads: list[Load], trace_path: str, runs: int,
            model_dir: str, log_dir: Path, chunk: int = 16,
            progress: Callable[[str], None] = print, profile_s: float = 0.0,
            profile_process: str = "engine") -> dict:
    """Every variant at every load, `runs` times round-robin (`round_order`); {load: {"variants",
    "vs_stock"}}.
    With `profile_s`, each variant's last run is also sampled by py-spy (which slows it: its
    figures are then left out of the summary and kept as `profiles`)."""
    out: dict = {}
    for load in loads:
        trace = TimedTrace(trace_path, load.requests, load.sec_multiplier, chunk)
        raw: dict[str, list[dict]] = {v.name: [] for v in variants}
        profiles: dict[str, dict] = {}
        for run in range(runs + (1 if profile_s > 0 else 0)):
            for v in round_order(variants, run):
                t0 = time.time()
                if run == runs:              # the profiled run: its figures are not compared
                    r = run_once(v, load, trace, model_dir, log_dir, run, profile_s=profile_s,
                                 process=profile_process)
                    profiles[v.name] = r.get("profile")
                    progress(f"{load.name} profile {v.name}: {r.get('profile')}")
                    continue
                r = run_once(v, load, trace, model_dir, log_dir, run)
                raw[v.name].append(r)
                progress(f"{load.name} run {run + 1}/{runs} {v.name:24s} {r['duration']:7.1f} s  "
                         f"{r['request_throughput']:.2f} req/s  TTFT {r['mean_ttft_s']:.2f} s  "
                         f"TPOT {r['mean_tpot_ms']:.1f} ms  prefix hits {_pct(r['engine']['prefix_hit_rate'])}  "
                         f"({time.time() - t0:.0f} s with start-up)")
        out[load.name] = load_result(load.sec_multiplier, load.blocks, load.requests, raw, profiles or None)
    return out


def load_result(sec_multiplier: float, blocks: int, requests: int, raw: dict[str, list[dict]],
                profiles: dict | None = None) -> dict:
    """One load's stored result from its runs (`raw`: each variant's runs, round by round)."""
    summary = {name: summarize(rs) for name, rs in raw.items()}
    return {"sec_multiplier": sec_multiplier, "blocks": blocks, "requests": requests, "order": "rotated",
            "variants": summary, "raw": raw, "profiles": profiles,
            "vs_stock": versus_stock(summary) if "stock" in summary else {},
            "paired_vs_stock": paired_versus_stock(raw) if "stock" in raw else {}}


def pool(docs: list[dict], where: list[str]) -> dict:
    """The rounds of several invocations on the same trace, load and variants as one result: each
    invocation's rounds kept as rounds (stock paired with the variants of its own round), summaries
    and ratios over all of them. `where` names each doc in errors."""
    first = docs[0]["settings"]
    for d, w in zip(docs, where):
        for k in ("trace", "chunk", "vllm", "model"):
            if d["settings"].get(k) != first.get(k):
                raise ValueError(f"{w}: settings.{k} is {d['settings'].get(k)!r}, not {first.get(k)!r} "
                                 f"as in {where[0]}: only runs of the same set-up pool")
    loads: dict = {}
    for name in docs[0]["loads"]:
        parts = [d["loads"].get(name) for d in docs]
        if any(p is None for p in parts):
            continue
        shape = (parts[0]["sec_multiplier"], parts[0]["blocks"], parts[0]["requests"], sorted(parts[0]["raw"]))
        for p, w in zip(parts, where):
            if (p["sec_multiplier"], p["blocks"], p["requests"], sorted(p["raw"])) != shape:
                raise ValueError(f"{w}: load {name!r} differs from {where[0]}'s (rate, blocks, requests "
                                 f"or variants): only runs of the same set-up pool")
        raw = {v: [r for p in parts for r in p["raw"][v]] for v in parts[0]["raw"]}   # the first's order
        loads[name] = load_result(*shape[:3], raw)
    if not loads:
        raise ValueError(f"no load is in all of {', '.join(where)}")
    return loads

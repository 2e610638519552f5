"""Where a live run's streams stall: the engine, or the serving path around it (a diagnosis).

    python -m benchmarks.stream_stalls --trace ag2.jsonl --max-calls 300 --json stalls.json
    python -m benchmarks.stream_stalls --trace ag2.jsonl --max-calls 300 --vllm-own-priority   # vLLM's priorities

Runs one `agentrt bench --engine vllm --policies lru` replay (vLLM's own eviction order: the
stalls are the serving path's, whatever the policy) with vLLM's iteration log
on and its log lines stamped to the millisecond (`VLLM_LOGGING_CONFIG_PATH`), and meanwhile, from
this process (not the replay's), an observer: back-to-back streamed requests of `--observer-tokens`
tokens whose every chunk's arrival it records. It also samples each process's CPU time
and the time its threads were runnable but waiting for a CPU (/proc schedstat, Linux) every
two seconds. Then, for each gap longer than `--gap-ms` in the observer's
stream it reads the engine iterations vLLM's API server logged inside it:
- `iterating`: iterations kept being logged (at least one per `--gap-ms` of the gap) and none
  of them took half the gap: the engine ran and its outputs were processed, yet no token reached
  this client: the time is on the serving path (streaming, HTTP), not in the engine;
- `long_iteration`: one iteration took at least half the gap: the engine's compute;
- `quiet`: neither (the API server logged little: its own loop was held up).
It prints and writes {"gaps": [...], "summary": {...}, "cpu": {...}, "bench": token_stalls of
the replay}. The observer adds one stream to the replay's load; it is a diagnosis, not a figure
to compare with other runs. Assumptions: the log line format of vLLM 0.32 (the pattern of
`agentrt.enginebench.iterations`, read here), one vLLM server at a time, Linux.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from agentrt.enginebench.iterations import LINE
from agentrt.local.proc_cpu import API_SERVER, ENGINE_CORE, WORKER, role, task_times

# vLLM's iteration line (iterations.LINE) after the stamp LOGGING gives it: group 1 the time,
# then LINE's groups (the elapsed ms is group 6)
STAMPED = re.compile(r"^\S+ (\d+\.\d+) .*?" + LINE.pattern, re.M)
VLLM_KINDS = {API_SERVER: "vLLM API server", ENGINE_CORE: "vLLM engine core", WORKER: "vLLM worker"}
LOGGING = {"version": 1, "disable_existing_loggers": False,
           "formatters": {"f": {"class": "vllm.logging_utils.NewLineFormatter",
                                "format": "%(levelname)s %(created).3f [%(filename)s:%(lineno)d] %(message)s"}},
           "handlers": {"h": {"class": "logging.StreamHandler", "formatter": "f", "level": "INFO",
                              "stream": "ext://sys.stdout"}},
           "loggers": {"vllm": {"handlers": ["h"], "level": "INFO", "propagate": False}}}


def observe(log_dir: Path, tokens: int, stop: threading.Event, times: list[float]) -> None:
    """Stream back-to-back requests to the run's vLLM (found from its log) until `stop`."""
    import httpx
    port = None
    while port is None and not stop.is_set():
        for log in log_dir.glob("vllm-*.log"):
            m = re.search(r"'port': (\d+)", log.read_text(errors="replace"))
            port = m and m.group(1)
        time.sleep(0.5)
    url = f"http://127.0.0.1:{port}"
    with httpx.Client(timeout=httpx.Timeout(600.0, connect=5.0)) as c:
        model = None
        while model is None and not stop.is_set():
            try:
                model = c.get(url + "/v1/models").json()["data"][0]["id"]
            except (httpx.HTTPError, KeyError, IndexError, ValueError):
                time.sleep(0.5)
        body = {"model": model, "prompt": [7, 8, 9], "max_tokens": tokens, "ignore_eos": True, "stream": True}
        while not stop.is_set():
            try:
                with c.stream("POST", url + "/v1/completions", json=body) as r:
                    for line in r.iter_lines():
                        if line.startswith("data:") and "[DONE]" not in line:
                            times.append(time.time())
            except httpx.HTTPError:
                return                    # the server went away: the run is over


def cpu_sampler(stop: threading.Event, out: dict[str, dict[str, list[float]]], me: int,
                bench_pid: list[int]) -> None:
    """Per process kind, over each two-second window with the engine at work: its CPU share and
    its threads' time runnable but waiting for a CPU (`schedstat`), in cores."""
    def kind(pid: int) -> str:
        if pid == me:
            return "observer"
        if bench_pid and pid == bench_pid[0]:
            return "replay client"
        return VLLM_KINDS.get(role(pid), "")

    def snap() -> dict[int, tuple[float, float, str]]:
        d = {}
        for p in os.listdir("/proc"):
            if not p.isdigit():
                continue
            k = kind(int(p))
            times = task_times(int(p)) if k else (0.0, 0.0)
            if times != (0.0, 0.0):              # (0, 0): it exited meanwhile
                d[int(p)] = (*times, k)
        return d
    a = snap()
    while not stop.wait(2.0):
        b = snap()
        share: dict[str, list[float]] = {}
        for p, (run, wait, k) in b.items():
            r0, w0, _ = a.get(p, (run, wait, k))
            x = share.setdefault(k, [0.0, 0.0])
            x[0] += (run - r0) / 2.0
            x[1] += (wait - w0) / 2.0
        if share.get("vLLM worker", [0.0])[0] > 0.5:       # windows with the engine at work only
            for k, (run, wait) in share.items():
                o = out.setdefault(k, {"cpu": [], "waiting_for_cpu": []})
                o["cpu"].append(run)
                o["waiting_for_cpu"].append(wait)
        a = b


def classify(times: list[float], its: list[tuple[float, float]], gap_s: float) -> list[dict]:
    """Each observer gap longer than `gap_s` with the iterations logged inside it."""
    out = []
    for a, b in zip(times, times[1:]):
        if b - a <= gap_s:
            continue
        inside = [ms for t, ms in its if a <= t <= b]
        longest = max(inside, default=0.0) / 1000.0
        kind = ("long_iteration" if longest >= (b - a) / 2 else
                "iterating" if len(inside) >= (b - a) / gap_s else "quiet")
        out.append({"at": a, "gap_s": b - a, "iterations": len(inside), "longest_iteration_s": longest,
                    "kind": kind})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.stream_stalls", description=__doc__.split("\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--trace")
    src.add_argument("--workload")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-calls", type=int, default=None)
    ap.add_argument("--vllm-blocks", type=int, default=256)
    ap.add_argument("--scale", type=float, default=0.125)
    ap.add_argument("--think-scale", type=float, default=0.25)
    ap.add_argument("--observer-tokens", type=int, default=100)
    ap.add_argument("--gap-ms", type=float, default=100.0)
    ap.add_argument("--vllm-own-priority", action="store_true",
                    help="leave vLLM's engine core at its own CPU priority (bench's --vllm-own-priority)")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="agentrt-stalls-"))
    cfg = work / "logging.json"
    cfg.write_text(json.dumps(LOGGING))
    res_path = work / "bench.json"
    cmd = [sys.executable, "-m", "agentrt.cli", "bench", *(["--trace", a.trace] if a.trace else
                                                           ["--workload", a.workload, "--seed", str(a.seed)]),
           "--engine", "vllm", "--policies", "lru", "--vllm-blocks", str(a.vllm_blocks),
           "--scale", str(a.scale), "--think-scale", str(a.think_scale), "--train-fraction", "0", "--quiet",
           "--engine-iterations", "--json", str(res_path), "--log-dir", str(work)]
    if a.max_calls:
        cmd += ["--max-calls", str(a.max_calls)]
    if a.vllm_own_priority:
        cmd.append("--vllm-own-priority")
    stop, times, cpu, bench_pid = threading.Event(), [], {}, []
    threads = [threading.Thread(target=observe, args=(work, a.observer_tokens, stop, times), daemon=True),
               threading.Thread(target=cpu_sampler, args=(stop, cpu, os.getpid(), bench_pid), daemon=True)]
    for t in threads:
        t.start()
    print("$", " ".join(cmd[2:]), flush=True)
    proc = subprocess.Popen(cmd, env=dict(os.environ, VLLM_LOGGING_CONFIG_PATH=str(cfg)), stdout=subprocess.DEVNULL)
    bench_pid.append(proc.pid)
    rc = proc.wait()
    stop.set()
    if rc:
        print(f"the bench failed ({rc}); its logs are in {work}", file=sys.stderr)
        return rc
    its = [(float(m.group(1)), float(m.group(6))) for log in work.glob("vllm-*.log")
           for m in STAMPED.finditer(log.read_text(errors="replace"))]
    first, last = (its[0][0], its[-1][0]) if its else (0.0, 0.0)
    gaps = classify([t for t in times if first <= t <= last], its, a.gap_ms / 1000.0)
    by_kind = {k: {"gaps": sum(g["kind"] == k for g in gaps), "seconds": sum(g["gap_s"] for g in gaps if g["kind"] == k)}
               for k in ("iterating", "long_iteration", "quiet")}
    doc = json.loads(res_path.read_text())
    r = doc["results"]["lru"]
    out = {"command": "python -m benchmarks.stream_stalls " + " ".join(argv if argv is not None else sys.argv[1:]),
           "summary": {"observed_s": last - first, "observer_tokens": len(times), "gaps": len(gaps),
                       "gap_seconds": sum(g["gap_s"] for g in gaps), "by_kind": by_kind},
           "cpu": {k: {m: sum(v[m]) / len(v[m]) for m in v} for k, v in cpu.items()},
           "bench": {"token_stalls": r.get("token_stalls"), "ttft_mean_s": r.get("ttft_mean_s"),
                     "tpot_mean_s": r.get("tpot_mean_s"), "engine_phases": r.get("engine_phases")},
           "gaps": [{**g, "at": g["at"] - first} for g in gaps]}
    s = out["summary"]
    print(f"observer: {s['gaps']} gaps over {a.gap_ms:.0f} ms, {s['gap_seconds']:.1f} s of {s['observed_s']:.1f} s")
    for k, v in by_kind.items():
        print(f"  {k:15s} {v['gaps']:4d} gaps  {v['seconds']:6.1f} s")
    print("while the worker ran (cores): " + ", ".join(
        f"{k} {v['cpu']:.2f} on a CPU, {v['waiting_for_cpu']:.2f} waiting for one" for k, v in sorted(out["cpu"].items())))
    print("the replay's token stalls:", out["bench"]["token_stalls"])
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1) + "\n")
        print(f"written to {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

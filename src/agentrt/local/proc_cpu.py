"""CPU time of a local vLLM server's processes, by role, from Linux /proc.

Model: vLLM serves from three kinds of process: its API server (the HTTP front, tokenizing and
streaming), its engine core (the scheduler, where a KV connector's scheduler hooks run) and its
worker (the model). Each thread's /proc schedstat holds the time it ran on a CPU and the time it
was runnable but waited for one; summed per process and role, two readings bracket a run, so a
benchmark can say which process a configuration made busier (`connector_cost.py`) instead of
inferring it from latency. Assumptions: Linux /proc (elsewhere every reading is empty); vLLM
names its processes by title (`VLLM::EngineCore`, `VLLM::Worker`, cut to 15 characters in
`comm`); the API server's command line holds `api_server`.
"""

from __future__ import annotations

import os
from pathlib import Path

from agentrt.local.engine_nice import ENGINE_CORE_COMM, comm, descendants

API_SERVER, ENGINE_CORE, WORKER = "api_server", "engine_core", "worker"
ROLES = (API_SERVER, ENGINE_CORE, WORKER)


def role(pid: int, proc: Path = Path("/proc")) -> str | None:
    """Which vLLM process `pid` is, or None (a wrapper, a helper, gone)."""
    c = comm(pid, proc)
    if c == ENGINE_CORE_COMM:
        return ENGINE_CORE
    if c == "VLLM::Worker":
        return WORKER
    try:
        cmd = (proc / str(pid) / "cmdline").read_bytes()
    except OSError:
        return None
    return API_SERVER if b"api_server" in cmd else None


def task_times(pid: int, proc: Path = Path("/proc")) -> tuple[float, float]:
    """(seconds on a CPU, seconds runnable but waiting for one), summed over the process's threads."""
    run = wait = 0.0
    try:
        tasks = os.listdir(proc / str(pid) / "task")
    except OSError:
        return 0.0, 0.0
    for t in tasks:
        try:
            f = (proc / str(pid) / "task" / t / "schedstat").read_text().split()
        except OSError:
            continue                                   # the thread ended meanwhile
        run, wait = run + int(f[0]) / 1e9, wait + int(f[1]) / 1e9
    return run, wait


def server_cpu(server_pid: int, proc: Path = Path("/proc")) -> dict[str, tuple[float, float]]:
    """{role: (CPU seconds, seconds waiting for a CPU)} over `server_pid` and every process below it."""
    out: dict[str, tuple[float, float]] = {}
    if not proc.is_dir():
        return out
    for pid in [server_pid, *descendants(server_pid, proc)]:
        r = role(pid, proc)
        if r is None:
            continue
        run, wait = task_times(pid, proc)
        r0, w0 = out.get(r, (0.0, 0.0))
        out[r] = (r0 + run, w0 + wait)
    return out


def cpu_between(before: dict[str, tuple[float, float]], after: dict[str, tuple[float, float]]) -> dict:
    """What each role used between two `server_cpu` readings: {"cpu_s": {role: s}, "cpu_wait_s": {role: s}}."""
    roles = [r for r in ROLES if r in after]
    return {"cpu_s": {r: round(after[r][0] - before.get(r, (0.0, 0.0))[0], 3) for r in roles},
            "cpu_wait_s": {r: round(after[r][1] - before.get(r, (0.0, 0.0))[1], 3) for r in roles}}

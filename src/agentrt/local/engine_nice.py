"""Lower the CPU priority of a local vLLM's engine core, so that on a small CPU host it does not
starve the processes that measure it.

Model: vLLM's engine core process waits for its worker's output in a busy loop (`sched_yield` on
a shared-memory queue, vLLM's `SpinCondition`), so while the worker computes it holds a whole
core. On a host with as many cores as vLLM's processes need (a GPU server) that costs nothing;
on this project's 2-core machine the worker is bound to one core and the engine core's spinning
takes the other, where the API server and every client also run: the clients then wait for a
CPU and see tokens in bursts the engine did not make (measured: `benchmarks/stream_stalls.py`,
docs/notes/results-details.md). At nice 19 the engine core still gets every idle cycle, so its
loop runs as before when nothing else wants the core, and yields it at once when a client does.
The same niceness is applied to stock vLLM and to vLLM with agentrt's connector.
Assumptions: Linux `/proc` (elsewhere nothing is changed and None is returned); vLLM names its
engine core process `VLLM::EngineCore` (its `comm`, cut to 15 characters by the kernel); raising
a process's own children's niceness needs no privilege.
"""

from __future__ import annotations

import os
from pathlib import Path

ENGINE_CORE_COMM = "VLLM::EngineCor"        # "VLLM::EngineCore" as /proc/<pid>/comm shows it
ENGINE_CORE_NICE = 19                       # the default: the lowest priority


def descendants(pid: int, proc: Path = Path("/proc")) -> list[int]:
    """Every process below `pid` in the process tree (children first), from /proc/<pid>/stat."""
    children: dict[int, list[int]] = {}
    for d in proc.iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])   # after the (comm), which may hold spaces
        children.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(0), []):
            out.append(c)
            todo.append(c)
    return out


def comm(pid: int, proc: Path = Path("/proc")) -> str | None:
    try:
        return (proc / str(pid) / "comm").read_text().strip()
    except OSError:
        return None


def lower_engine_core(server_pid: int, nice: int = ENGINE_CORE_NICE, proc: Path = Path("/proc")) -> list[int]:
    """Set every thread of each engine core below `server_pid` to `nice`; the engine core PIDs
    changed (empty where there is none, or no /proc)."""
    if not proc.is_dir():
        return []
    done = []
    for pid in descendants(server_pid, proc):
        if comm(pid, proc) != ENGINE_CORE_COMM:
            continue
        try:
            for tid in os.listdir(proc / str(pid) / "task"):
                os.setpriority(os.PRIO_PROCESS, int(tid), nice)
        except (OSError, ValueError):
            continue                                  # it exited meanwhile
        done.append(pid)
    return done

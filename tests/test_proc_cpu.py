"""CPU time of a server's processes by role (`agentrt.local.proc_cpu`), on a fake /proc tree and
on this process's own."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agentrt.local.proc_cpu import cpu_between, role, server_cpu, task_times


def _proc(root: Path, pid: int, ppid: int, comm: str, cmd: str, tasks: dict[int, tuple[int, int]]) -> None:
    d = root / str(pid)
    (d / "task").mkdir(parents=True)
    (d / "stat").write_text(f"{pid} ({comm}) S {ppid} 0 0\n")
    (d / "comm").write_text(comm + "\n")
    (d / "cmdline").write_bytes(cmd.encode().replace(b" ", b"\0"))
    for tid, (run_ns, wait_ns) in tasks.items():
        (d / "task" / str(tid)).mkdir()
        (d / "task" / str(tid) / "schedstat").write_text(f"{run_ns} {wait_ns} 7\n")


def test_roles_and_times_over_a_servers_tree(tmp_path):
    _proc(tmp_path, 10, 1, "python", "python -m agentrt.local.supervise 9", {10: (1, 1)})
    _proc(tmp_path, 11, 10, "python", "python -m vllm.entrypoints.openai.api_server --model m",
          {11: (2_000_000_000, 500_000_000), 12: (1_000_000_000, 0)})
    _proc(tmp_path, 13, 11, "VLLM::EngineCor", "VLLM::EngineCore", {13: (4_000_000_000, 1_000_000_000)})
    _proc(tmp_path, 14, 13, "VLLM::Worker", "VLLM::Worker", {14: (8_000_000_000, 0)})
    _proc(tmp_path, 20, 1, "VLLM::Worker", "VLLM::Worker", {20: (9, 9)})          # another server's
    assert role(10, tmp_path) is None and role(11, tmp_path) == "api_server" and role(99, tmp_path) is None
    assert task_times(11, tmp_path) == (3.0, 0.5)
    got = server_cpu(10, tmp_path)
    assert got == {"api_server": (3.0, 0.5), "engine_core": (4.0, 1.0), "worker": (8.0, 0.0)}
    later = dict(got, worker=(10.5, 0.25))
    d = cpu_between(got, later)
    assert d["cpu_s"] == {"api_server": 0.0, "engine_core": 0.0, "worker": 2.5}
    assert d["cpu_wait_s"]["worker"] == 0.25
    assert server_cpu(10, tmp_path / "none") == {}


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux /proc")
def test_task_times_of_this_process_grow_with_work():
    a, _ = task_times(os.getpid())
    sum(i * i for i in range(300_000))
    b, _ = task_times(os.getpid())
    assert b > a > 0

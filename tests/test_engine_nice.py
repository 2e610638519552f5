"""local/engine_nice.py: vLLM's engine core found below a server process and set to a low priority."""

import os
import subprocess
import sys
import time

import pytest

from agentrt.local.engine_nice import ENGINE_CORE_COMM, comm, descendants, lower_engine_core


def _fake_proc(tmp_path, tree: dict[int, tuple[int, str]]):
    for pid, (ppid, comm) in tree.items():
        d = tmp_path / str(pid)
        d.mkdir()
        (d / "stat").write_text(f"{pid} ({comm}) S {ppid} {pid} {pid} 0 -1\n")
        (d / "comm").write_text(comm + "\n")
    (tmp_path / "self").mkdir()                  # not a PID: skipped
    return tmp_path


def test_descendants_walk_the_whole_tree_below_a_process(tmp_path):
    proc = _fake_proc(tmp_path, {10: (1, "supervise"), 11: (10, "python"), 12: (11, "a b) c"),
                                 13: (12, ENGINE_CORE_COMM), 20: (1, "other")})
    assert descendants(10, proc) == [11, 12, 13]          # a comm with ") " in it parses
    assert descendants(13, proc) == [] and descendants(99, proc) == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs Linux /proc")
def test_a_real_engine_core_below_this_process_is_reniced_and_nothing_else():
    # two children sleeping; one names itself as vLLM names its engine core
    code = ("import sys, time\nif sys.argv[1] == 'core':\n    open('/proc/self/comm', 'w').write({!r})\n"
            "time.sleep(30)\n").format(ENGINE_CORE_COMM)
    core = subprocess.Popen([sys.executable, "-c", code, "core"])
    other = subprocess.Popen([sys.executable, "-c", code, "other"])
    try:
        for _ in range(100):
            if open(f"/proc/{core.pid}/comm").read().strip() == ENGINE_CORE_COMM:
                break
            time.sleep(0.05)
        before = os.getpriority(os.PRIO_PROCESS, other.pid)
        done = lower_engine_core(os.getpid(), 19)
        # other tests' vLLM servers below this worker may hold engine cores too: only those count
        assert core.pid in done and other.pid not in done
        assert all(comm(p) in (ENGINE_CORE_COMM, None) for p in done)      # None: it has exited since
        assert os.getpriority(os.PRIO_PROCESS, core.pid) == 19
        assert os.getpriority(os.PRIO_PROCESS, other.pid) == before
    finally:
        core.kill()
        other.kill()
        core.wait()
        other.wait()


def test_no_proc_changes_nothing(tmp_path):
    assert lower_engine_core(1, 19, tmp_path / "absent") == []

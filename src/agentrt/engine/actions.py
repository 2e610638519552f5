"""How the simulated engine carries out a policy's actions, and what a policy may read of it.

`RuntimeActions` is the `Simulator`'s part that carries them out; it owns the table of prefetched
blocks still in flight (`inflight`), which admission and preemption read and add to. Between
scheduler steps the runtime's `act` returns actions:
- `WarmUp`: a real request (the agent's anchor plus a minimal message, one output token) queued
  only when nothing waits; it costs engine time and cache space and is never a user hit.
- `Prefetch`: host-tier blocks loaded into the GPU off any request, over the PCIe link; a request
  that hits a block whose transfer is still in flight waits for it.
`_View` is the `EngineView` the policy sees: idle flags, free blocks, the PCIe budget of one
iteration like the last one (the simulator passes in what the last one was), and read-only
lookups into the cache.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

from agentrt.cache.block import HOST, host_run
from agentrt.cache.radix import RadixKVCache
from agentrt.engine.costs import CostModel
from agentrt.engine.links import Link
from agentrt.engine.metrics import Metrics
from agentrt.engine.observers import Observers
from agentrt.engine.request import LOADING, Request
from agentrt.runtime import events as ev
from agentrt.runtime.actions import Prefetch, WarmUp
from agentrt.runtime.runtime import AgentRuntime


class RuntimeActions:
    def __init__(self, runtime: AgentRuntime, cache: RadixKVCache, cost: CostModel, metrics: Metrics,
                 waiting: deque[Request], pcie: Link, rids: Iterator[int], observers: Observers,
                 block_size: int, block_bytes: int, host_blocks: int) -> None:
        """`rids`: request ids, shared with arrivals (`lifecycle.py`)."""
        self.runtime = runtime
        self.cache = cache
        self.cost = cost
        self.metrics = metrics
        self.waiting = waiting
        self.pcie = pcie
        self.rids = rids
        self.observers = observers
        self.block_size = block_size
        self.block_bytes = block_bytes
        self.host_blocks = host_blocks
        self.inflight: dict = {}        # prefetched block -> time its PCIe transfer is done

    def act(self, now: float, decode_only: bool, last_iter_s: float) -> None:
        """Carry out what the runtime asks for at `now`; `decode_only` and `last_iter_s`: whether
        the latest iteration (or fast-forward stretch) had no prefill, and how long it took."""
        view = _View(self.cache, now, not self.waiting, self.pcie.free_at <= now, self.block_size,
                     self.host_blocks, decode_only,
                     # what the link moves while one iteration (or decode-only stretch) like the last one runs
                     int(last_iter_s * self.cost.pcie_bytes_s // max(1, self.block_bytes)))
        for a in self.runtime.act(now, view):
            if type(a) is WarmUp:
                self._warm_up(a, now)
            elif type(a) is Prefetch:
                self._prefetch(a, now)

    def _warm_up(self, a: WarmUp, now: float) -> None:
        """A real request: the anchor plus a minimal message, one output token, never a user hit."""
        if self.waiting:
            return
        rid = next(self.rids)
        bs = self.block_size
        n_in = max(a.input_length, len(a.hash_ids) * bs + 1)
        ids = list(a.hash_ids) + [-rid] * (-(-n_in // bs) - len(a.hash_ids))
        info = ev.CallInfo(rid=rid, workflow=f"__warmup__{rid}", agent=a.agent,
                           tenant=a.tenant, index=0, hash_ids=ids, input_length=n_in,
                           output_length=1, block_size=bs, warmup=True)
        r = Request(info, None, now)
        self.waiting.append(r)
        if self.observers.on:
            self.observers.observe(ev.CallArrived(now, info))

    def _prefetch(self, a: Prefetch, now: float) -> None:
        loaded = self.cache.prefetch(a.node, now, a.max_blocks, a.evict_below)
        if not loaded:
            return
        done = self.pcie.send(now, self.cost.pcie_seconds(len(loaded) * self.block_bytes))
        for b in loaded:
            self.inflight[b] = done
        self.metrics.prefetch_blocks += len(loaded)


def wait_for_prefetch(inflight: dict, r: Request, lease, now: float) -> None:
    """A request that hits blocks still in flight from a prefetch (`inflight`: block -> when its
    transfer is done) waits for the transfer."""
    for b in [b for b, t in inflight.items() if t <= now]:
        del inflight[b]
    if not inflight:
        return
    ready = r.ready_at
    node = lease.node
    while node is not None and node.parent is not None:
        t = inflight.get(node)
        if t is not None and t > ready:
            ready = t
        node = node.parent
    if ready > now:
        r.ready_at = ready
        r.state = LOADING


class _View:
    """What a policy may read of the simulated engine when it acts (see runtime.actions.EngineView)."""

    __slots__ = ("_cache", "now", "idle", "pcie_idle", "gpu_free", "block_size", "host_blocks",
                 "decode_only", "pcie_blocks_per_iteration")

    def __init__(self, cache: RadixKVCache, now: float, idle: bool, pcie_idle: bool, block_size: int,
                 host_blocks: int, decode_only: bool, pcie_blocks_per_iteration: int) -> None:
        self._cache = cache
        self.now = now
        self.idle = idle
        self.pcie_idle = pcie_idle
        self.gpu_free = cache.free
        self.block_size = block_size
        self.host_blocks = host_blocks
        self.decode_only = decode_only
        self.pcie_blocks_per_iteration = pcie_blocks_per_iteration

    def gpu_prefix(self, tenant: str, hash_ids: list[int]) -> int:
        return self._cache.match(tenant, hash_ids, len(hash_ids))[0]

    def lookup(self, tenant: str, hash_ids: list[int]):
        return self._cache.lookup(tenant, hash_ids)

    @staticmethod
    def on_host(node) -> bool:
        """Whether the path to `node` ends in the host tier (host blocks are always a suffix)."""
        return node.tier == HOST

    host_blocks_on_path = staticmethod(host_run)

    @property
    def cache(self):
        return self._cache

"""How the simulated engine carries out a policy's actions, and what a policy may read of it.

A mixin of `Simulator`. Between scheduler steps the runtime's `act` returns actions:
- `WarmUp`: a real request (the agent's anchor plus a minimal message, one output token) queued
  only when nothing waits; it costs engine time and cache space and is never a user hit.
- `Prefetch`: host-tier blocks loaded into the GPU off any request, over the PCIe link; a request
  that hits a block whose transfer is still in flight waits for it.
`_View` is the `EngineView` the policy sees: idle flags, free blocks, the PCIe budget of one
iteration like the last one, and read-only lookups into the cache.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentrt.cache.block import HOST, host_run
from agentrt.engine.request import LOADING, Request
from agentrt.runtime import events as ev
from agentrt.runtime.actions import Prefetch, WarmUp

if TYPE_CHECKING:
    from agentrt.engine.simulator import Simulator


class RuntimeActions:
    def _act(self) -> None:
        for a in self.runtime.act(self.now, _View(self)):
            if type(a) is WarmUp:
                self._warm_up(a)
            elif type(a) is Prefetch:
                self._prefetch(a)

    def _warm_up(self, a: WarmUp) -> None:
        """A real request: the anchor plus a minimal message, one output token, never a user hit."""
        if self.waiting:
            return
        self._rid += 1
        bs = self.config.block_size
        n_in = max(a.input_length, len(a.hash_ids) * bs + 1)
        ids = list(a.hash_ids) + [-self._rid] * (-(-n_in // bs) - len(a.hash_ids))
        info = ev.CallInfo(rid=self._rid, workflow=f"__warmup__{self._rid}", agent=a.agent,
                           tenant=a.tenant, index=0, hash_ids=ids, input_length=n_in,
                           output_length=1, block_size=bs, warmup=True)
        r = Request(info, None, self.now)
        self.waiting.append(r)
        if self._events:
            self._observe(ev.CallArrived(self.now, info))

    def _prefetch(self, a: Prefetch) -> None:
        loaded = self.cache.prefetch(a.node, self.now, a.max_blocks, a.evict_below)
        if not loaded:
            return
        start = max(self.now, self._pcie_free)
        self._pcie_free = start + self.cost.pcie_seconds(len(loaded) * self.config.block_bytes)
        for b in loaded:
            self._inflight[b] = self._pcie_free
        self.metrics.prefetch_blocks += len(loaded)

    def _wait_for_prefetch(self, r: Request, lease, now: float) -> None:
        """A request that hits blocks still in flight from a prefetch waits for the transfer."""
        inflight = self._inflight
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

    __slots__ = ("_sim", "now", "idle", "pcie_idle", "gpu_free", "block_size", "host_blocks",
                 "decode_only", "pcie_blocks_per_iteration")

    def __init__(self, sim: "Simulator") -> None:
        self._sim = sim
        self.now = sim.now
        self.idle = not sim.waiting
        self.pcie_idle = sim._pcie_free <= sim.now
        self.gpu_free = sim.cache.free
        self.block_size = sim.config.block_size
        self.host_blocks = sim.config.host_blocks
        self.decode_only = sim._last_decode_only
        # what the link moves while one iteration (or decode-only stretch) like the last one runs
        self.pcie_blocks_per_iteration = int(sim._last_iter_s * sim.cost.pcie_bytes_s
                                             // max(1, sim.config.block_bytes))

    def gpu_prefix(self, tenant: str, hash_ids: list[int]) -> int:
        return self._sim.cache.match(tenant, hash_ids, len(hash_ids))[0]

    def lookup(self, tenant: str, hash_ids: list[int]):
        return self._sim.cache.lookup(tenant, hash_ids)

    @staticmethod
    def on_host(node) -> bool:
        """Whether the path to `node` ends in the host tier (host blocks are always a suffix)."""
        return node.tier == HOST

    host_blocks_on_path = staticmethod(host_run)

    @property
    def cache(self):
        return self._sim.cache


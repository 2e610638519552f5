"""Incremental output allocation and preemption by recompute: `Preemption`, a part of `Simulator`.

As in vLLM V1 under FCFS scheduling:
- Before each iteration, every decoding request whose next token starts a new block takes one:
  free blocks, else unlocked cached blocks evicted in the policy's order (all of them at once,
  `RadixKVCache.grow_all`, when they fit). When they do not, the requests are visited in
  admission order and, for each, the most recently admitted running request that holds memory
  is preempted until its block is found or it was itself the one preempted.
- A preempted request keeps what is reusable: the prompt blocks its prefill had completed and
  the output blocks it had completed (when the trace names them) enter the cache, tagged with its
  thread, then unlocked like any finished call's. Its partial block and reservations are freed.
  A victim still loading host blocks leaves them in the tree, in flight: whoever hits them waits
  for the transfer. It goes back to the front of the waiting queue and, on re-admission,
  prefills its prompt plus the tokens it had generated, with prefix hits on whatever survived
  (`Request.requeue`).
"""

from __future__ import annotations

from collections import deque

from agentrt.cache.radix import RadixKVCache
from agentrt.engine.admission import AdmissionGate, CacheQueueView
from agentrt.engine.metrics import Metrics
from agentrt.engine.records import Records
from agentrt.engine.request import DECODE, LOADING, WAITING, Request
from agentrt.runtime.runtime import AgentRuntime
from agentrt.sched.base import Scheduler


class Preemption:
    def __init__(self, cache: RadixKVCache, sched: Scheduler, runtime: AgentRuntime, metrics: Metrics,
                 waiting: deque[Request], running: list[Request], gate: AdmissionGate,
                 view: CacheQueueView | None, inflight: dict, records: Records, block_size: int) -> None:
        """`running`: the engine's running requests (changed in place), in admission order;
        `inflight`: prefetched block -> when its PCIe transfer is done (`actions.py`)."""
        self.cache = cache
        self.sched = sched
        self.runtime = runtime
        self.metrics = metrics
        self.waiting = waiting
        self.running = running
        self.gate = gate
        self.view = view
        self.inflight = inflight
        self.records = records
        self.block_size = block_size
        self.reorders = sched.reorders
        self.preempted = False          # a request was preempted in this iteration

    def take_blocks(self, decode: list[Request], now: float) -> None:
        """Decoding requests whose next token opens a block take one each, in admission order,
        preempting from the tail of the running list when nothing is free or evictable."""
        bs = self.block_size
        grow = self.cache.grow
        for r in decode:
            if r.state != DECODE or r.context % bs or r.lease is None:
                continue
            while not grow(r.lease, 1):
                victim = self.victim(now)
                self.preempt(victim, now)
                if victim is r:
                    break

    def victim(self, now: float) -> Request | None:
        """The running request to preempt: the most recently admitted one (FCFS, as vLLM), or
        under a reordering scheduler the lowest-ranked one (vLLM's priority scheduling)."""
        if self.reorders:
            view = self.view
            view.now = now
            rank = self.sched.rank
            held = [v for v in self.running if v.lease is not None and v.state != WAITING]
            return max(held, key=lambda v: rank(v.info, v.arrival, view)) if held else None
        for v in reversed(self.running):
            if v.lease is not None and v.state != WAITING:
                return v
        return None

    def preempt(self, r: Request, now: float) -> None:
        """Free `r`'s memory, keeping its completed blocks as cache, and queue it at the front."""
        cache = self.cache
        lease = r.lease
        bs = self.block_size
        ohids = r.call.output_hash_ids if r.call is not None else []
        if r.state == DECODE:
            done = r.context // bs - lease.n_full
            node = cache.cache_output(lease, ohids[r.out_start:r.out_start + done] if done > 0 else [])
        else:
            if r.state == LOADING and r.ready_at > now and lease.host_hit:
                # blocks still in flight over PCIe: whoever hits them next waits for the transfer
                b = lease.node
                for _ in range(lease.host_hit):
                    self.inflight[b] = r.ready_at
                    b = b.parent
            if r.state == LOADING and r.ready_at > now and lease.remote_hit:
                # blocks still on their way from a peer never arrived: keep only the local hits
                local = (lease.gpu_hit + lease.host_hit) * bs
                if r.context > local:
                    r.context = local
            cache.commit_prompt(lease, now, r.context // bs)
            node = lease.node
        # tag before the path is unlocked and scored, as a finished call's blocks are
        self.runtime.keep_preempted(r.info.rid, node)
        records = self.records
        if records.holds is not None and not r.info.warmup:
            records.holds.append((len(records.stream) - 1, id(r), -1, None, None))
        cache.release(lease)
        r.requeue(ohids)
        self.waiting.appendleft(r)
        self.preempted = True
        self.gate.blocked = False
        if not r.info.warmup:
            self.metrics.preemptions += 1

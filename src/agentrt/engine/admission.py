"""Admission: which waiting requests the simulated engine admits, in the scheduler's order.

`Admission` is the `Simulator`'s part that admits; it owns the network link peer transfers use,
and reads the waiting and running requests, the cache and the `AdmissionGate` it shares with
the rest of the engine. With the default scheduler (`fcfs`) the waiting queue stays in arrival
order (a preempted request goes back to its front) and the first request that does not fit
blocks the rest, as in vLLM's FCFS. A reordering scheduler (`agentrt.sched`) ranks the queue
before each admission pass and may hold calls back (`defer`) until an event or their
hold bound (`max_hold_s`). When the best request does not fit and the scheduler `skips_blocked`,
later requests are admitted only if they fit in free blocks (they evict nothing), and never past
a request that has waited more than the scheduler's `max_wait_s`.
Admission locks the cached prefix and reserves what the prefill needs (`RadixKVCache.acquire`);
a request admitted again after a preemption prefills its prompt plus what it had generated and
is counted only as recomputation (see `lifecycle.py`).
In a cluster with peer transfer (`cluster.transfer`), the blocks after the local hits that
another replica holds on its GPU are received over the network instead of computed: they are
reserved like blocks to compute and enter the tree when the prefill completes.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from agentrt.cache.block import GPU, gpu_run
from agentrt.cache.radix import RadixKVCache
from agentrt.engine.actions import wait_for_prefetch
from agentrt.engine.batch import ChunkPlan
from agentrt.engine.costs import CostModel
from agentrt.engine.links import Link
from agentrt.engine.metrics import Metrics
from agentrt.engine.observers import Observers
from agentrt.engine.records import Records
from agentrt.engine.request import LOADING, PREFILL, Request
from agentrt.runtime import events as ev
from agentrt.sched.base import Scheduler

# peers(tenant, hash_ids, start, n_full) -> blocks after `start` that another replica holds on its GPU
PeerLookup = Callable[[str, list[int], int, int], int]


@dataclass(slots=True)
class AdmissionGate:
    """Whether an admission pass may admit anything. `blocked`: the last pass stopped at a request
    that did not fit, or held calls back; a finish, a preemption, a prefill a held call waits for
    or (under a reordering scheduler) an arrival reopens it. `wake_at`: when a held call's bound
    is reached, which reopens it too."""
    blocked: bool = False
    wake_at: float | None = None


class CacheQueueView:
    """What schedulers see of the simulated cache: each waiting call's resident prefix.

    Matches are incremental: the deepest matched block of each call is remembered and, while it
    is still on the GPU (so are its ancestors: a GPU block's parent is on the GPU), the next
    lookup only extends it; a call whose matched block left the GPU is matched again from the root.
    """

    __slots__ = ("cache", "cost", "running", "waiting", "now", "_memo")

    def __init__(self, cache: RadixKVCache, cost: CostModel, running: list[Request],
                 waiting: deque[Request]) -> None:
        self.cache = cache
        self.cost = cost
        self.running = running        # the engine's own lists, changed in place
        self.waiting = waiting
        self.now = 0.0
        self._memo: dict[int, tuple] = {}

    def cached_blocks(self, call) -> int:
        memo = self._memo.get(call.rid)
        if memo is not None and memo[0].tier == GPU:
            node, depth = memo
        else:
            node = self.cache.roots.get(call.tenant)
            if node is None:
                return 0
            depth = 0
        node, depth = gpu_run(node, call.hash_ids, depth, call.n_full)
        self._memo[call.rid] = (node, depth)
        return depth

    @property
    def capacity_blocks(self) -> int:
        return self.cache.gpu_capacity

    @property
    def reserved_blocks(self) -> int:
        return self.cache.reserved

    @property
    def requests(self) -> int:
        return len(self.running) + len(self.waiting)

    def prefill_seconds(self, tokens: int) -> float:
        return self.cost.prefill(tokens, 0)

    def tenant_cached_blocks(self, tenant: str) -> int:
        return self.cache.tenant_blocks.get(tenant, 0)

    def tenant_running_blocks(self, tenant: str) -> int:
        """GPU blocks the tenant's running requests span (prompt and output, cached ones too)."""
        return sum(r.total_blocks for r in self.running if r.info.tenant == tenant and r.lease is not None)

    def forget(self, rid: int) -> None:
        self._memo.pop(rid, None)


class Admission:
    def __init__(self, cache: RadixKVCache, sched: Scheduler, cost: CostModel, metrics: Metrics,
                 waiting: deque[Request], running: list[Request], gate: AdmissionGate,
                 view: CacheQueueView | None, pcie: Link, inflight: dict,
                 plan_chunk: Callable[[ChunkPlan, Request, float], bool], records: Records,
                 observers: Observers, block_size: int, block_bytes: int, max_running: int) -> None:
        """`inflight`: prefetched block -> when its PCIe transfer is done (`actions.py`);
        `plan_chunk`: gives an admitted request its first chunk (`batch.py`, `cache_at="schedule"`)."""
        self.cache = cache
        self.sched = sched
        self.cost = cost
        self.metrics = metrics
        self.waiting = waiting
        self.running = running
        self.gate = gate
        self.view = view
        self.pcie = pcie
        self.inflight = inflight
        self.plan_chunk = plan_chunk
        self.records = records
        self.observers = observers
        self.block_size = block_size
        self.block_bytes = block_bytes
        self.max_running = max_running
        # peer transfer (a cluster sets these): blocks other replicas hold, received at net_bytes_s
        self.peers: PeerLookup | None = None
        self.net_bytes_s = 0.0
        self.net = Link()

    def _order_waiting(self, now: float) -> None:
        view = self.view
        view.now = now
        rank = self.sched.rank
        ordered = sorted(self.waiting, key=lambda r: rank(r.info, r.arrival, view))
        self.waiting.clear()
        self.waiting.extend(ordered)

    def _fits_free(self, r: Request) -> bool:
        gpu, host = self.cache.match(r.info.tenant, r.hash_ids, r.n_full)
        return r.n_full - gpu + r.extra_blocks <= self.cache.free

    def _fetch_from_peers(self, r: Request, lease, local: int, now: float) -> int:
        """Blocks after the local hits that a peer replica holds on its GPU: they are copied over
        the replica's network link (one transfer at a time, after any earlier one) instead of
        computed; the request loads until they are in. Returns the blocks fetched."""
        n = self.peers(r.info.tenant, r.hash_ids, local, r.n_full)
        if n <= 0:
            return 0
        lease.remote_hit = n
        nbytes = n * self.block_bytes
        ready = self.net.send(now, nbytes / self.net_bytes_s)
        if r.state == LOADING and r.ready_at > ready:     # a host-tier load that ends later
            ready = r.ready_at
        r.ready_at = ready
        r.state = LOADING
        self.metrics.net_bytes += nbytes
        return n

    def admit(self, now: float, plan: ChunkPlan | None = None) -> None:
        """Admit waiting requests in the scheduler's order while they fit. `plan` (`cache_at=
        "schedule"`): give each admitted request its first chunk before the next is looked up, and
        admit none once the iteration's token budget is spent (vLLM's scheduler)."""
        cache = self.cache
        sched = self.sched
        bs = self.block_size
        m = self.metrics
        waiting = self.waiting
        running = self.running
        max_running = self.max_running
        view = self.view
        records = self.records
        observers = self.observers
        if sched.reorders and len(waiting) > 1:
            self._order_waiting(now)
        blocked = False
        wake = None
        defers = sched.defers
        i = 0
        while i < len(waiting) and len(running) < max_running:
            if plan is not None and plan.budget <= 0:
                break        # as vLLM, no request is scheduled without token budget
            r = waiting[i]
            info = r.info
            resumed = r.preemptions > 0
            if defers and not resumed and sched.may_hold(r.arrival, now):
                view.now = now
                if sched.defer(info, r.arrival, view):
                    t = sched.held_until(info, r.arrival)
                    if t > now:
                        wake = t if wake is None or t < wake else wake
                        i += 1
                        continue
                    # its bound is reached (the engine parked until exactly then): it goes now,
                    # or parking until `t` again would never move the clock
            if not resumed and r.total_blocks > cache.gpu_capacity:
                r.oversize = True
                r.state = PREFILL
                lease = None
            else:
                if blocked and not self._fits_free(r):
                    i += 1
                    continue
                lease = cache.acquire(info.tenant, r.hash_ids, r.n_full, r.extra_blocks, now)
                if lease is None:
                    if not sched.skips_blocked or sched.aged(r.arrival, now):
                        self.gate.blocked = True
                        return
                    blocked = True
                    i += 1
                    continue
            del waiting[i]
            running.append(r)
            r.lease = lease
            if view is not None:
                view.forget(info.rid)
            gpu_tok = host_tok = remote_tok = 0
            if lease is not None:
                cap = r.prompt_len - 1
                local = lease.gpu_hit + lease.host_hit
                gpu_tok = min(lease.gpu_hit * bs, cap)
                host_tok = min(local * bs, cap) - gpu_tok
                r.state = PREFILL
                if lease.host_hit:
                    r.ready_at = self.pcie.send(now, self.cost.pcie_seconds(lease.host_hit * self.block_bytes))
                    r.state = LOADING
                if self.peers is not None and local < r.n_full:
                    fetched = self._fetch_from_peers(r, lease, local, now)
                    remote_tok = min((local + fetched) * bs, cap) - gpu_tok - host_tok
                if self.inflight and lease.gpu_hit:
                    wait_for_prefetch(self.inflight, r, lease, now)
                m.block_touches += lease.gpu_hit + lease.host_hit
            r.hit_tokens = gpu_tok + host_tok + remote_tok
            r.context = r.hit_tokens
            r.prefill_left = r.prompt_len - r.hit_tokens
            if resumed:
                # hit rate and prefill tokens stay per first admission; this is the price of preempting
                redo = r.computed - r.hit_tokens if r.computed > r.hit_tokens else 0
                if info.warmup:
                    m.warmup_prefill_tokens += redo
                else:
                    m.recompute_tokens += redo
                info.extra["resumed"] = r.preemptions
            elif info.warmup:
                m.warmup_calls += 1
                m.warmup_prefill_tokens += r.prefill_left
            else:
                m.prompt_tokens += info.input_length
                m.gpu_hit_tokens += gpu_tok
                m.host_hit_tokens += host_tok
                m.remote_hit_tokens += remote_tok
                m.prefill_tokens += r.prefill_left
                m.queue_wait.append(now - r.arrival)
                ts = m.tenant(info.tenant)
                ts.calls += 1
                ts.prompt_tokens += info.input_length
                ts.gpu_hit_tokens += gpu_tok
                ts.queue_wait.append(now - r.arrival)
                if r.oversize:
                    m.oversize_calls += 1
                if records.stream is not None:
                    records.stream.append((info.tenant, info.hash_ids[:r.n_full], info.input_length, True))
                if records.admitted is not None:
                    records.admitted.append((info.workflow, info.index))
            if records.holds is not None and lease is not None and not info.warmup:
                records.holds.append((len(records.stream) - 1, id(r), 1, info.tenant, r.hash_ids[:r.n_full]))
            if observers.on and lease is not None:
                observers.observe(ev.CallAdmitted(now, info, lease.node, lease.gpu_hit, lease.host_hit, lease.remote_hit))
            if plan is not None and plan.budget > 0 and r.state == PREFILL:
                self.plan_chunk(plan, r, now)
        if blocked or wake is not None:
            # nothing changes until an arrival, a finish or a held call's wait bound
            self.gate.blocked = True
            self.gate.wake_at = wake

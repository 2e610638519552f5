"""Admission: which waiting requests the simulated engine admits, in the scheduler's order.

A mixin of `Simulator`. With the default scheduler (`fcfs`) the waiting queue stays in arrival
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

from typing import TYPE_CHECKING

from agentrt.cache.block import GPU, gpu_run
from agentrt.engine.request import LOADING, PREFILL, Request
from agentrt.runtime import events as ev

if TYPE_CHECKING:
    from agentrt.engine.batch import ChunkPlan
    from agentrt.engine.simulator import Simulator


class CacheQueueView:
    """What schedulers see of the simulated cache: each waiting call's resident prefix.

    Matches are incremental: the deepest matched block of each call is remembered and, while it
    is still on the GPU (so are its ancestors: a GPU block's parent is on the GPU), the next
    lookup only extends it; a call whose matched block left the GPU is matched again from the root.
    """

    __slots__ = ("cache", "engine", "now", "_memo")

    def __init__(self, cache, engine) -> None:
        self.cache = cache
        self.engine = engine          # its `running` list is replaced as requests finish
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
        return len(self.engine.running) + len(self.engine.waiting)

    def prefill_seconds(self, tokens: int) -> float:
        return self.engine.cost.prefill(tokens, 0)

    def tenant_cached_blocks(self, tenant: str) -> int:
        return self.cache.tenant_blocks.get(tenant, 0)

    def tenant_running_blocks(self, tenant: str) -> int:
        """GPU blocks the tenant's running requests span (prompt and output, cached ones too)."""
        return sum(r.total_blocks for r in self.engine.running if r.info.tenant == tenant and r.lease is not None)

    def forget(self, rid: int) -> None:
        self._memo.pop(rid, None)


class Admission:
    def _order_waiting(self: "Simulator") -> None:
        view = self._view
        view.now = self.now
        rank = self.sched.rank
        ordered = sorted(self.waiting, key=lambda r: rank(r.info, r.arrival, view))
        self.waiting.clear()
        self.waiting.extend(ordered)

    def _fits_free(self: "Simulator", r: Request) -> bool:
        gpu, host = self.cache.match(r.info.tenant, r.hash_ids, r.n_full)
        return r.n_full - gpu + r.extra_blocks <= self.cache.free

    def _fetch_from_peers(self: "Simulator", r: Request, lease, local: int, now: float) -> int:
        """Blocks after the local hits that a peer replica holds on its GPU: they are copied over
        the replica's network link (one transfer at a time, after any earlier one) instead of
        computed; the request loads until they are in. Returns the blocks fetched."""
        n = self.peers(r.info.tenant, r.hash_ids, local, r.n_full)
        if n <= 0:
            return 0
        lease.remote_hit = n
        nbytes = n * self.config.block_bytes
        start = now if now > self._net_free else self._net_free
        self._net_free = start + nbytes / self.net_bytes_s
        ready = self._net_free
        if r.state == LOADING and r.ready_at > ready:     # a host-tier load that ends later
            ready = r.ready_at
        r.ready_at = ready
        r.state = LOADING
        self.metrics.net_bytes += nbytes
        return n

    def _admit(self: "Simulator", plan: "ChunkPlan | None" = None) -> None:
        """Admit waiting requests in the scheduler's order while they fit. `plan` (`cache_at=
        "schedule"`): give each admitted request its first chunk before the next is looked up, and
        admit none once the iteration's token budget is spent (vLLM's scheduler)."""
        cache = self.cache
        sched = self.sched
        bs = self.config.block_size
        now = self.now
        m = self.metrics
        waiting = self.waiting
        if sched.reorders and len(waiting) > 1:
            self._order_waiting()
        blocked = False
        wake = None
        defers = sched.defers
        i = 0
        while i < len(waiting) and len(self.running) < self.config.max_running:
            if plan is not None and plan.budget <= 0:
                break        # as vLLM, no request is scheduled without token budget
            r = waiting[i]
            info = r.info
            resumed = r.preemptions > 0
            if defers and not resumed and sched.may_hold(r.arrival, now):
                self._view.now = now
                if sched.defer(info, r.arrival, self._view):
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
                        self._admit_blocked = True
                        return
                    blocked = True
                    i += 1
                    continue
            del waiting[i]
            self.running.append(r)
            r.lease = lease
            if self._view is not None:
                self._view.forget(info.rid)
            gpu_tok = host_tok = remote_tok = 0
            if lease is not None:
                cap = r.prompt_len - 1
                local = lease.gpu_hit + lease.host_hit
                gpu_tok = min(lease.gpu_hit * bs, cap)
                host_tok = min(local * bs, cap) - gpu_tok
                r.state = PREFILL
                if lease.host_hit:
                    start = max(now, self._pcie_free)
                    self._pcie_free = start + self.cost.pcie_seconds(lease.host_hit * self.config.block_bytes)
                    r.ready_at = self._pcie_free
                    r.state = LOADING
                if self.peers is not None and local < r.n_full:
                    fetched = self._fetch_from_peers(r, lease, local, now)
                    remote_tok = min((local + fetched) * bs, cap) - gpu_tok - host_tok
                if self._inflight and lease.gpu_hit:
                    self._wait_for_prefetch(r, lease, now)
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
                if self.stream is not None:
                    self.stream.append((info.tenant, info.hash_ids[:r.n_full], info.input_length, True))
                if self.admitted is not None:
                    self.admitted.append((info.workflow, info.index))
            if self.holds is not None and lease is not None and not info.warmup:
                self.holds.append((len(self.stream) - 1, id(r), 1, info.tenant, r.hash_ids[:r.n_full]))
            if self._events and lease is not None:
                self._observe(ev.CallAdmitted(now, info, lease.node, lease.gpu_hit, lease.host_hit, lease.remote_hit))
            if plan is not None and plan.budget > 0 and r.state == PREFILL:
                self._plan_chunk(plan, r, now)
        if blocked or wake is not None:
            # nothing changes until an arrival, a finish or a held call's wait bound
            self._admit_blocked = True
            self._wake_at = wake

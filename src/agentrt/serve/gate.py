"""The admission gate of `agentrt serve --scheduler NAME`: calls wait in the server, in the
scheduler's order, and go to vLLM while the engine has room.

Model
- Release rule: release only what the engine would start now, so vLLM's own FCFS queue stays
  (nearly) empty and the order is the scheduler's. Room comes from vLLM's `/metrics`
  (`engine_load.py`, scraped every `poll_s` while calls are held, with the server's upstream
  client) and from what the gate released since that scrape: the engine has room while its
  waiting queue was empty at the scrape, its running requests plus the calls released since stay
  below its running cap when that is known (`max_running`: `--max-num-seqs`, from a preset file
  or `--gate-max-running`), and the call's uncached prompt fits in the KV blocks not held by
  running requests (`usage`), less the prompts released since. A held call holds
  no engine slot: it has not been sent.
- The pass (`release_pass`) is the simulator's admission (`engine/admission.py`) over the held
  calls, driving the same scheduler object (`scheduler.py`): calls in `Scheduler.rank` order
  (past `max_wait_s` first); `defer` asked while `may_hold` (a held call is asked again at every
  pass, and goes once `held_until` passed); when the best call does not fit, a scheduler that
  `skips_blocked` releases later calls only into free blocks (blocks neither used nor holding a
  cached prefix: estimated from the tokens computed since start), never past a call aged past
  `max_wait_s`; any other stops at it. Passes run after each arrival, release, first answer
  byte, finish, workflow end and scrape.
- A scrape counts for `fresh_s` (1 s; what the gate released since is added to it), so a call
  that finds nobody held is decided at once, without a scrape on its path. An older one: with
  nothing of the gate's in flight the engine is taken as idle (the call goes at once);
  otherwise the gate waits for the next scrape. A scrape that fails releases every held call in order (the
  upstream is down: the calls get its error, not a hang). With the pool size unknown, one call
  per scrape goes while the engine's queue is empty.
- Bounds: every call leaves the gate within `max_queue_s` (released, `bound`); at most
  `max_held` calls are held, at most `max_held_per_tenant` of one tenant; when the gate is full
  a tenant holding fewer than the tenant holding most pushes that tenant's newest held call out
  (it gets the 429 instead, having sent nothing), so a burst cannot lock the others out. A
  client that leaves while held is removed at once (`leave`).
- Accounting for the scheduler's view (`live_view.py`): each released call's uncached prompt
  (until its first answer byte) and output blocks (`reserved_blocks`), each tenant's running
  blocks, and the engine's requests.
Time is the server's clock, read here and passed to the scheduler.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from dataclasses import dataclass

from agentrt.runtime import events as ev
from agentrt.serve.engine_load import EngineLoad, LoadPoller
from agentrt.serve.live_view import CHARS_PER_TOKEN, LiveView, PrefillRate
from agentrt.serve.metrics import usage_tokens

HELD, RELEASED, ANSWERING, GONE = range(4)


@dataclass(slots=True, eq=False)
class Ticket:
    info: ev.CallInfo            # the scheduler's copy of the call
    arrival: float
    state: int = HELD
    reason: str | None = None    # why it left the gate (None: held)
    waiter: asyncio.Future | None = None
    released_at: float = 0.0
    answered_at: float | None = None
    cached: int = 0              # blocks cached at release (the server's estimate)
    need: int = 0                # prompt blocks the engine computes
    out_blocks: int = 0
    deferred: bool = False       # the scheduler held it at least once
    priority: int | None = None


class AdmissionGate:
    def __init__(self, sched, cache, metrics, *, clock, guard, report, block_chars: int = 256,
                 max_held: int = 1024, max_held_per_tenant: int | None = None, poll_s: float = 0.05,
                 max_queue_s: float | None = None, prefill: PrefillRate | None = None,
                 fixed_capacity: bool = False, fresh_s: float = 1.0, max_running: int | None = None) -> None:
        if max_held < 1 or not poll_s > 0:
            raise ValueError("max_held must be >= 1 and poll_s > 0")
        self.sched, self.cache, self.metrics = sched, cache, metrics
        self.clock, self.guard, self.report = clock, guard, report     # the bridge's (never fail a call)
        self.tokens_per_block = block_chars / CHARS_PER_TOKEN
        self.max_held = max_held
        self.max_running = max_running                   # vLLM's --max-num-seqs, when known
        self.max_held_per_tenant = max(1, min(max_held, max_held_per_tenant or max_held))
        self.poll_s, self.fresh_s = poll_s, max(fresh_s, 2 * poll_s)
        s = sched.sched
        self.max_queue_s = max_queue_s or (s.max_hold_s + s.max_wait_s)
        self.prefill = prefill or PrefillRate()
        self.fixed_capacity = fixed_capacity
        self.held: dict[int, Ticket] = {}                # rid -> ticket, in arrival order
        self.by_tenant: dict[str, dict[int, Ticket]] = {}
        self.inflight: dict[int, Ticket] = {}            # released, answer not ended
        self.running_blocks: dict[str, int] = {}         # tenant -> its released calls' blocks
        self.load = EngineLoad()
        self._since = 0                                  # released after the last scrape
        self._reserved = 0                               # see reserved_blocks (kept as calls move)
        self._holds: deque[float] = deque(maxlen=64)
        self.poller = LoadPoller(poll_s, clock, self._loaded, lambda: bool(self.held))
        self._kicked = False

    # ------------------------------------------------------------------ the view's figures
    def capacity_blocks(self) -> int:
        return int(self.cache.capacity_tokens // self.tokens_per_block)

    def reserved_blocks(self) -> int:
        return self._reserved

    def engine_requests(self) -> int:
        return self.load.running + self.load.waiting + self._since + len(self.held)

    def tenant_running_blocks(self, tenant: str) -> int:
        return self.running_blocks.get(tenant, 0)

    # ------------------------------------------------------------------ entering and leaving
    def room_for(self, tenant: str) -> bool:
        """Whether a call of `tenant` may enter; when the gate is full, a tenant holding fewer
        calls than the one holding most pushes that tenant's newest call out (it gets a 429)."""
        mine = len(self.by_tenant.get(tenant, ()))
        if mine >= self.max_held_per_tenant:
            return False
        if len(self.held) < self.max_held:
            return True
        top = max(self.by_tenant, key=lambda t: len(self.by_tenant[t]))
        if len(self.by_tenant[top]) <= mine + 1:
            return False
        victim = next(reversed(self.by_tenant[top].values()))
        self._drop(victim, "full")
        return True

    def retry_after(self) -> int:
        """Seconds a refused client should wait: the mean hold of the last calls, 1 to 60."""
        mean = sum(self._holds) / len(self._holds) if self._holds else 1.0
        return max(1, min(60, math.ceil(mean)))

    def enter(self, info: ev.CallInfo | None) -> Ticket | None:
        """Hold a call (its scheduler copy; None: the scheduler cannot rank it, it goes at once)."""
        if info is None:
            self.metrics.releases["unranked"].inc()
            return None
        t = Ticket(info, self.clock())
        self.held[info.rid] = t
        self.by_tenant.setdefault(info.tenant, {})[info.rid] = t
        self.metrics.held.set(len(self.held))
        self.poller.start()
        self.kick()
        return t

    async def wait(self, t: Ticket) -> str:
        """Until the call is released: the reason ("gone": its client left; "full": pushed out)."""
        if t.reason is None:
            t.waiter = asyncio.get_running_loop().create_future()
            await t.waiter
        return t.reason

    def leave(self, t: Ticket) -> None:
        """The call's client left: a held call leaves the gate at once."""
        if t.state == HELD:
            self._drop(t, "gone")

    def _drop(self, t: Ticket, why: str) -> None:
        self._unhold(t)
        t.state = GONE
        self._holds.append(self.clock() - t.arrival)
        self.metrics.hold.observe(self.clock() - t.arrival)
        if why == "gone":
            self.metrics.releases["gone"].inc()
        else:
            self.metrics.rejected(t.info.tenant)
        self._resolve(t, why)

    @staticmethod
    def _resolve(t: Ticket, reason: str) -> None:
        t.reason = reason
        if t.waiter is not None and not t.waiter.done():
            t.waiter.set_result(reason)

    def _unhold(self, t: Ticket) -> None:
        rid, tenant = t.info.rid, t.info.tenant
        self.held.pop(rid, None)
        mine = self.by_tenant.get(tenant)
        if mine is not None:
            mine.pop(rid, None)
            if not mine:
                del self.by_tenant[tenant]
        self.metrics.held.set(len(self.held))

    def answering(self, t: Ticket) -> None:
        """The first byte of the call's answer: the engine computed its prompt."""
        if t.state == RELEASED:
            t.state = ANSWERING
            self._reserved -= t.need
            t.answered_at = now = self.clock()
            self.guard("scheduler", self.sched.prompt_cached, t.info, now, t.cached)
            self.kick()

    def finish(self, t: Ticket, status, usage: dict | None, tool_call: bool) -> None:
        """The call's answer ended (or the call failed, or left while held)."""
        now = self.clock()
        if t.state == HELD:
            self._drop(t, "gone")
        released = t.state != GONE
        ok = status == 200
        if released:
            self.inflight.pop(t.info.rid, None)
            self._run(t.info.tenant, -(t.info.n_full + t.out_blocks + 1))
            self._reserved -= (t.need if t.state == RELEASED else 0) + t.out_blocks + 1
            prompt, cached = usage_tokens(usage)
            if ok:
                # the cached prefix the engine reported (the estimate at release without usage)
                n = len(t.info.hash_ids)
                hit = int(n * min(1.0, cached / prompt)) if prompt else t.cached
                self.guard("scheduler", self.sched.admitted, t.info, now, hit)
                if t.state == RELEASED:             # a JSON answer: its prompt was computed too
                    self.guard("scheduler", self.sched.prompt_cached, t.info, now, hit)
            if ok and prompt and t.answered_at is not None and t.answered_at < now:
                self.prefill.observe(t.answered_at - t.released_at, prompt - cached)
        out = usage.get("completion_tokens") if ok and isinstance(usage, dict) else None
        self.guard("scheduler", self.sched.finished, t.info, now, released, ok, out, tool_call)
        t.state = GONE
        self.kick()

    def _run(self, tenant: str, blocks: int) -> None:
        n = self.running_blocks.get(tenant, 0) + blocks
        if n > 0:
            self.running_blocks[tenant] = n
        else:
            self.running_blocks.pop(tenant, None)

    # ------------------------------------------------------------------ releasing
    def kick(self) -> None:
        """Run a pass soon (once, however many events ask before it runs)."""
        if self._kicked or not self.held:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._kicked = True
        loop.call_soon(self._safe_pass)

    def _safe_pass(self) -> None:
        self._kicked = False
        try:
            self.release_pass()
        except Exception:      # a bug in a scheduler must not strand the held calls
            self.report("gate")
            for t in list(self.held.values()):
                self._release(t, self.clock(), None, "unranked")

    def release_pass(self) -> int:
        """Release what the engine has room for, in the scheduler's order; returns how many."""
        if not self.held:
            return 0
        now = self.clock()
        view = LiveView(self, now)
        snap, cap, s = self.load, self.capacity_blocks(), self.sched.sched
        fresh = now - snap.at <= self.fresh_s
        mode = ("measured" if snap.ok else "unmeasured") if fresh else ("idle" if not self.inflight else "stale")
        self._since = sum(1 for t in self.inflight.values() if t.released_at >= snap.at)
        used = 0.0 if mode == "idle" else snap.usage * cap + sum(
            t.need for t in self.inflight.values() if t.released_at >= snap.at)
        # blocks neither used nor caching anything: what backfill may take
        free_only = max(0.0, cap - used - min(cap - used, self.cache.work / self.tokens_per_block))
        stop = mode == "stale" or (mode == "measured" and (snap.waiting > 0 or self._at_cap(snap)
                                                           or (not cap and self._since)))
        blocked = False
        n = 0
        for t in self.sched.order(list(self.held.values()), view):
            info, arrival = t.info, t.arrival
            if now - arrival >= self.max_queue_s:
                n += self._release(t, now, view, "bound")
                continue
            if stop:
                continue
            if mode == "unmeasured":
                n += self._release(t, now, view, "unmeasured")
                continue
            aged = s.aged(arrival, now)
            bound = t.deferred and not s.may_hold(arrival, now)
            if s.defers and not bound and s.may_hold(arrival, now) and s.defer(info, arrival, view):
                t.deferred = True
                if s.held_until(info, arrival) > now:
                    continue
                bound = True           # its hold's own bound is reached: it goes now
            need = max(1, info.n_full - view.cached_blocks(info))
            if cap and info.n_full + 1 > cap:
                n += self._release(t, now, view, "oversize")
                continue
            if cap and used + need > cap:
                if not s.skips_blocked or aged:
                    stop = True          # the head blocks the rest, as in the engine
                else:
                    blocked = True
                continue
            if blocked and need > free_only:
                continue
            reason = ("hold_bound" if bound else "aged" if aged
                      else "backfill" if blocked else "idle" if mode == "idle" else "room")
            n += self._release(t, now, view, reason)
            used += need
            free_only -= need
            # pool unknown: one per scrape
            stop = stop or (mode == "measured" and (not cap or self._at_cap(snap)))
        return n

    def _at_cap(self, snap: EngineLoad) -> bool:
        """vLLM's running requests, its queue and the calls released since fill its running cap."""
        return self.max_running is not None and snap.running + snap.waiting + self._since >= self.max_running

    def _release(self, t: Ticket, now: float, view: LiveView | None, reason: str) -> int:
        if t.state != HELD:
            return 0
        self._unhold(t)
        info = t.info
        t.state, t.released_at = RELEASED, now
        t.cached = view.cached_blocks(info) if view is not None else 0
        t.need = max(1, info.n_full - t.cached)
        t.out_blocks = -(-info.output_length // info.block_size)
        self.inflight[info.rid] = t
        self._run(info.tenant, info.n_full + t.out_blocks + 1)
        self._reserved += t.need + t.out_blocks + 1
        self._since += 1
        if view is not None:
            t.priority = self.guard("scheduler", self.sched.priority, info, t.arrival, view)
        self._holds.append(now - t.arrival)
        self.metrics.hold.observe(now - t.arrival)
        self.metrics.releases[reason].inc()
        self._resolve(t, reason)
        return 1

    # ------------------------------------------------------------------ scraping
    def attach(self, client) -> None:
        """The server's httpx client for the upstream (its `/metrics`)."""
        self.poller.client = client

    def _loaded(self, load: EngineLoad) -> None:
        self.load = load
        if load.capacity_tokens and not self.fixed_capacity:
            self.cache.capacity_tokens = load.capacity_tokens
        self._safe_pass()

    async def stop(self) -> None:
        await self.poller.stop()

    def stats(self) -> dict:
        busiest = sorted(self.by_tenant.items(), key=lambda kv: -len(kv[1]))[:8]
        return {"held": len(self.held), "in_flight": len(self.inflight), "max_held": self.max_held,
                "max_held_per_tenant": self.max_held_per_tenant, "max_queue_s": self.max_queue_s,
                "engine": {"running": self.load.running, "waiting": self.load.waiting,
                           "kv_usage": round(self.load.usage, 4), "read_ok": self.load.ok},
                "capacity_blocks": self.capacity_blocks(), "held_by_tenant": {k: len(v) for k, v in busiest},
                "prefill_s_per_1k_tokens": round(self.prefill.seconds(1000), 4)}


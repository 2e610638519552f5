"""The server's act loop: between user calls the policy may act, and a `WarmUp` becomes a real
upstream request. `RuntimeBridge` owns one (`bridge.acts`); it reads the bridge's runtime,
metrics, cache estimate, scheduler, templates, salts, clock and guard, and owns the warm-up state.

Model
- `run` waits for a wake-up (no call waits for its first answer byte any more) or
  `act_interval_s`, then `act_once`: nothing while a warm-up is in flight or a user call waits for
  the first byte of its answer (its prefill may be queued or running: a warm-up would compete);
  calls already answering (a long stream decoding) do not hold warm-ups back, so one tenant's
  stream never blocks another's warm-ups. Otherwise `runtime.act(now, view)` on the server's
  estimate of the engine (`view.py`), and each `WarmUp` is sent while no user call has arrived in
  the meantime. Other actions have nothing to act on here and are counted as ignored.
- Warm-up share (`WarmupShare`): the seconds a tenant's warm-ups kept the upstream busy decay
  over a minute; a tenant above `share` of that minute sends none (outcome "share") until it
  decays, so no tenant can keep the engine busy with warm-ups at the others' expense.
- A warm-up is the agent's anchor plus a minimal user message with max_tokens=1 (`warmup_body`),
  a workflow of its own under the agent's tenant and `cache_salt`, marked `agentrt_warmup` so the
  engine does not learn from it, at `WARMUP_PRIORITY` when a scheduler sets priorities. The
  runtime sees it arrive and finish like any call; a failed or refused warm-up is counted and
  the next act tries again.
- `sweep_loop` ends silent workflows on a timer, so an idle server cleans up too. The clock is
  read here and passed in; runtime calls go through the bridge's guard (never fail a request).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable

from agentrt.runtime import events as ev
from agentrt.runtime.actions import WarmUp
from agentrt.serve.blocks import warmup_body
from agentrt.serve.identity import Identity, forward_body
from agentrt.serve.metrics import usage_tokens
from agentrt.serve.view import ServerView
from agentrt.wire.priority import WARMUP_PRIORITY

log = logging.getLogger("agentrt.serve")
Post = Callable[[str, dict], Awaitable[tuple[int | str, dict | None]]]


class ActLoop:
    """The bridge's act loop and sweep timer. Owns the warm-up state: `warming` (one in flight),
    `sent` (warm-ups answered 200), `share` (`WarmupShare`) and `wake` (set when the last call
    waiting for its first answer byte got it)."""

    def __init__(self, bridge, interval_s: float = 0.25, warmup_share: float = 0.25) -> None:
        self.bridge = bridge
        self.interval_s = interval_s
        self.share = WarmupShare(warmup_share)
        self.warming = False
        self.sent = 0
        self.wake = asyncio.Event()

    def start(self, post: Post) -> asyncio.Future:
        return asyncio.ensure_future(asyncio.gather(self.run(post), self.sweep_loop()))

    async def sweep_loop(self, interval_s: float = 5.0) -> None:
        """End workflows silent for the runtime's `silent_after_s` (and release their state) on a
        timer, so an idle server cleans up too; the clock is read here and passed in."""
        while True:
            await asyncio.sleep(interval_s)
            self.bridge.guard("sweep", self.bridge.runtime.sweep, self.bridge.clock())

    @staticmethod
    async def stop(task: asyncio.Task) -> None:
        task.cancel()
        try:
            await task
        except (asyncio.CancelledError, Exception):
            pass

    async def run(self, post: Post) -> None:
        """The act loop: runs until cancelled; does nothing for policies that never act."""
        if not self.bridge.runtime.policy.acts:
            return
        while True:
            try:
                await asyncio.wait_for(self.wake.wait(), self.interval_s)
            except asyncio.TimeoutError:
                pass
            self.wake.clear()
            try:
                await self.act_once(post)
            except Exception:        # a bug here must not stop the loop for good
                self.bridge.report("act_loop")

    async def act_once(self, post: Post) -> int:
        if self.bridge.starting or self.warming:
            return 0
        view = ServerView(self.bridge.clock(), True, self.bridge.block_chars, self.bridge.cache)
        actions = self.bridge.guard("act", self.bridge.runtime.act, view.now, view, default=[]) or []
        sent = 0
        for a in actions:
            if not isinstance(a, WarmUp):
                self.bridge.metrics.actions_ignored.labels(self.bridge.policy_name, type(a).__name__).inc()
            elif not self.bridge.starting:
                sent += await self._warm(a, post)
        return sent

    async def _warm(self, a: WarmUp, post: Post) -> int:
        t = self.bridge.templates.get((a.tenant, a.agent))
        body = self.bridge.guard("warmup", warmup_body, t, list(a.hash_ids)) if t is not None else None
        if body is None:
            self.bridge.metrics.warmup(a.agent, "skipped", None, a.tenant)
            return 0
        if not self.share.allows(a.tenant, self.bridge.clock()):
            self.bridge.metrics.warmup(a.agent, "share", None, a.tenant)
            return 0
        # a workflow of its own that ends with it; `agentrt_warmup` tells the engine not to learn from it
        ident = Identity(a.agent, f"warmup:{a.agent}", a.tenant, end=True)
        wid = ident.key
        body = forward_body(body, ident, a.agent, salt=self.bridge.salts(a.tenant), warmup=True)
        if self.bridge.scheduler.active:
            body["priority"] = WARMUP_PRIORITY
        info = ev.CallInfo(next(self.bridge.request_ids), wid, a.agent, a.tenant, 0, list(a.hash_ids),
                           len(a.hash_ids) * self.bridge.block_chars, 1, self.bridge.block_chars, warmup=True)
        self.bridge.guard("observe", self.bridge.runtime.observe, ev.CallArrived(self.bridge.clock(), info))
        self.warming = True
        sent_at = self.bridge.clock()
        try:
            status, resp = await post(t.path, body)
        except Exception as e:   # the upstream is down: count it, the next act tries again
            log.warning("warm-up for %s failed: %s", a.agent, e)
            status, resp = "unreachable", None
            self.bridge.upstream_failed()
        finally:
            self.warming = False
            self.share.add(a.tenant, self.bridge.clock() - sent_at, self.bridge.clock())
        self.bridge.guard("observe", self.bridge.runtime.observe, ev.CallFinished(self.bridge.clock(), info, None))
        usage = resp.get("usage") if isinstance(resp, dict) else None
        self.bridge.metrics.warmup(a.agent, "ok" if status == 200 else "error", usage, a.tenant)
        prompt, cached = usage_tokens(usage)
        if status == 200:
            self.sent += 1
            self.bridge.cache.add_work((prompt or 0) - cached + 1)
            self.bridge.cache.record(a.tenant, list(a.hash_ids))
        self.bridge.recent.append({"workflow": wid, "agent": a.agent, "agent_source": "policy",
                            "tenant": a.tenant, "workflow_source": "warmup", "end": False,
                            "endpoint": t.path, "status": status, "prompt_tokens": prompt,
                            "cached_tokens": cached, "warmup": True})
        return 1 if status == 200 else 0


class WarmupShare:
    """Per tenant, the seconds its warm-ups kept the upstream busy, as a sum decaying with time
    constant `window_s`; a tenant whose sum reached `share * window_s` sends none until it
    decays. Time is passed in. At most `max_tenants` are kept (decayed ones go first)."""

    __slots__ = ("share", "window_s", "max_tenants", "_busy")

    def __init__(self, share: float = 0.25, window_s: float = 60.0, max_tenants: int = 4096) -> None:
        if not 0 < share <= 1:
            raise ValueError(f"warmup_share must be in (0, 1], got {share}")
        self.share, self.window_s, self.max_tenants = share, window_s, max_tenants
        self._busy: dict[str, tuple[float, float]] = {}       # tenant -> (seconds, as of)

    def load(self, tenant: str, now: float) -> float:
        got = self._busy.get(tenant)
        if got is None:
            return 0.0
        return got[0] * math.exp(-max(0.0, now - got[1]) / self.window_s)

    def allows(self, tenant: str, now: float) -> bool:
        return self.share >= 1 or self.load(tenant, now) < self.share * self.window_s

    def add(self, tenant: str, seconds: float, now: float) -> None:
        if tenant not in self._busy and len(self._busy) >= self.max_tenants:
            self._busy = {t: v for t, v in self._busy.items() if self.load(t, now) > 1e-3}
            if len(self._busy) >= self.max_tenants:
                self._busy.pop(min(self._busy, key=lambda t: self.load(t, now)))
        self._busy[tenant] = (self.load(tenant, now) + max(0.0, seconds), now)

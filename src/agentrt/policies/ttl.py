"""Continuum-style TTL pins: keep a tool-calling agent's KV for a time to live.

Model (after Continuum, Li et al. 2025)
- When a call ends in a tool call (its workflow's next call waits on a tool), the blocks of that
  agent's thread are pinned for a TTL: a fixed threshold (`ttl_s`) or, with `ttl="mean"`, the
  agent's mean observed think time so far (the fixed threshold until one is observed).
- A pin is released when the workflow's next call arrives (its prompt then holds the blocks
  itself) or when the TTL expires.
- Pinned blocks rank after every unpinned block; within each group the order is LRU. A pin is a
  priority, not a lock: when nothing else is left the cache may still evict a pinned block, so
  a pin can never stall admission.
Expiry is driven by the event clock (`now` of the latest event): time is passed in.
"""

from __future__ import annotations

import heapq

from agentrt.runtime import events as ev
from agentrt.runtime.state import threads_of
from agentrt.runtime.policy import Policy


class TTLPolicy(Policy):
    name = "ttl"
    description = "pin a tool-calling agent's KV for a time to live (Continuum-style)"
    dynamic = True
    wants_events = True
    needs_tags = True

    def __init__(self, ttl: str | float = "mean", ttl_s: float = 5.0, seed: int = 0) -> None:
        super().__init__(seed)
        if ttl != "mean":
            ttl_s = float(ttl)
        if ttl_s <= 0:
            raise ValueError(f"ttl_s must be > 0, got {ttl_s}")
        self.mode = "mean" if ttl == "mean" else "fixed"
        self.ttl_s = ttl_s
        self.now = 0.0
        self._expiries: list[float] = []
        self.pins = 0

    def _ttl_for(self, tenant: str, agent: str) -> float:
        if self.mode == "mean":
            prof = self.runtime.profile(tenant, agent)
            m = prof.mean_think_s if prof is not None else None
            if m is not None and m > 0:
                return m
        return self.ttl_s

    def observe(self, e) -> None:
        self.now = e.now
        t = type(e)
        if t is ev.CallFinished and e.tool_call and not e.call.warmup:
            wf = self.runtime.workflows.get(e.call.key)
            th = wf.threads.get(e.call.agent) if wf is not None else None
            if th is not None:
                until = e.now + self._ttl_for(e.call.tenant, th.agent)
                th.pinned_until = until
                heapq.heappush(self._expiries, until)
                self.pins += 1
                self.epoch += 1
        elif t is ev.CallArrived and not e.call.warmup:
            wf = self.runtime.workflows.get(e.call.key)
            if wf is not None:
                released = False
                for th in wf.threads.values():
                    if th.pinned_until > e.now:
                        th.pinned_until = -1.0
                        released = True
                if released:
                    self.epoch += 1
        elif t is ev.WorkflowEnded:
            self.epoch += 1
        exp = self._expiries
        if exp and exp[0] <= e.now:
            while exp and exp[0] <= e.now:
                heapq.heappop(exp)
            self.epoch += 1

    def score(self, block):
        tag = block.meta
        pinned = 0
        if tag is not None:
            now = self.now
            for th in threads_of(tag):
                if th.pinned_until > now and not th.workflow.ended:
                    pinned = 1
                    break
        return (pinned, block.last_touch)

    def state_bytes(self) -> int:
        return 8 * len(self._expiries) + 64

"""The retention floor: retained blocks go after every unretained one, whatever the policy says.

`RetentionFloor` wraps a policy (any policy, tenant shares included) and keys a block by
(retention priority, the wrapped policy's key): unretained blocks (priority 0) first in the
policy's own order, then retained blocks, lower retention priority first, the policy's order
within each priority. Where those keys order an eviction queue (vLLM's free queue through
`vllm/reorder.py`, the simulator's heap) a retained block is taken only when nothing unretained
is left: a floor, not a pin. The ledger (`retention.py`) decides what is retained, within its
budget; this wrapper feeds it the engine's events and turns its changes into epochs:
- every event: entries whose deadline passed (`event.now`) lapse back into policy order;
- `BlocksEvicted`: the evicted blocks' entries go (retention never holds memory);
- `WorkflowEnded`: the workflow's own retention (owner `retain:<workflow>`, the owner of a
  kv.retain hint that names no scope or names the workflow) is released.
`retain_path` is what a framework does that sends `kv.retain` for a call's whole context when
the call ends in a tool call (the simulator's `--retain-hints`; `agentrt serve --retain-tool-calls`
sends the hint itself). Nothing here reads a clock.
"""

from __future__ import annotations

from agentrt.runtime import events as ev
from agentrt.runtime.policy import Policy
from agentrt.runtime.retention import Retention, Span
from agentrt.runtime.wrapped import WrappedPolicy

TOOL_PRIORITY = 50           # what a framework retaining its context over a tool call asks for


def owner_name(scope: str | None, workflow: str) -> str:
    """The ledger's owner name of a kv.retain hint: its scope, else the request's workflow."""
    return "retain:" + (scope if scope is not None else workflow)


class RetentionFloor(WrappedPolicy):
    def __init__(self, inner: Policy, ledger: Retention) -> None:
        super().__init__(inner)
        self.ledger = ledger

    @property
    def epoch(self) -> int:
        return self.inner.epoch + self.ledger.changes

    def score(self, block):
        entries = self.ledger.entries
        return (self.ledger.priority(block) if entries and block in entries else 0, self.inner.score(block))

    def fallback_key(self, block):
        """The LRU order the safety net falls back to keeps the floor (and any tiers under it)."""
        entries = self.ledger.entries
        fk = getattr(self.inner, "fallback_key", None)
        return (self.ledger.priority(block) if entries and block in entries else 0,
                block.last_touch if fk is None else fk(block))

    def observe(self, e) -> None:
        led = self.ledger
        if led.entries:
            led.expire(e.now)
            t = type(e)
            if t is ev.BlocksEvicted:
                for b in e.blocks:
                    led.drop(b)
            elif t is ev.WorkflowEnded:
                led.release_owner((e.tenant, owner_name(None, e.workflow)))
        self.inner.observe(e)

    def tick(self, now: float) -> int:
        """Lapse what is due (an engine step without events)."""
        return self.ledger.expire(now) if self.ledger.entries else 0

    def retain_path(self, now: float, tenant: str, workflow: str, node, duration_s: float,
                    priority: int = TOOL_PRIORITY) -> str:
        """Retain the path ending at `node` (a call's whole context) for `duration_s`, as the
        workflow's own kv.retain hint."""
        nodes = node.path() if node is not None else []
        return self.ledger.retain(tenant, owner_name(None, workflow), nodes,
                                  (Span(0, None, priority, duration_s),), 1, 0, now)

    def stats(self) -> dict[str, int | float]:
        led = self.ledger
        out = dict(self.inner.stats(), retained_blocks=len(led))
        out.update(("retain_" + k, v) for k, v in led.counts.items())
        return out

    def state_bytes(self) -> int:
        return self.inner.state_bytes() + 200 * len(self.ledger)

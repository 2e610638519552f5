"""Agent anchors for PBKV-TA: which blocks an agent's new threads read, and how often they start.

Model
- An agent's anchor is the run of leading blocks every call of it starts with (its system
  prompt and tool definitions), as the runtime's agent profile learns it; it counts once two
  workflows have confirmed it. A block can anchor several agents of one tenant.
- Beyond the live threads that hold it, an anchor is read by the agent's next new thread in any
  workflow of the tenant. New threads start at the mean gap g between the agent's thread starts
  (the latest gaps, `SampleWindow`), so the anchor's density is 1 / g (memoryless arrivals); a
  block anchoring several agents takes the largest.
- Tables are per tenant and bounded: at most MAX_AGENT_KEYS agents keep an anchor or a
  thread-start record, max-min by tenant (`TenantKeyed`: past the bound the tenant with the most
  loses its oldest), so a client inventing agents can neither grow them nor drop another
  tenant's. Nothing reads a clock: times come with the calls.
"""

from __future__ import annotations

from agentrt.policies.pbkv.timing import TINY
from agentrt.runtime.window import MAX_AGENT_KEYS, SampleWindow, TenantKeyed


class AgentAnchors:
    __slots__ = ("table", "of", "starts")

    def __init__(self) -> None:
        self.table: dict[str, dict[int, set[str]]] = {}      # tenant -> hash -> agents anchored there
        self.of: dict[tuple[str, str], tuple] = TenantKeyed(  # (tenant, agent) -> its anchor's hashes
            MAX_AGENT_KEYS, on_drop=lambda key, hashes: self._set(key, hashes, ()))
        # (tenant, agent) -> [its latest thread start, the gaps between its thread starts]
        self.starts: dict[tuple[str, str], list] = TenantKeyed(MAX_AGENT_KEYS)

    def __bool__(self) -> bool:
        return bool(self.table)

    def thread_started(self, key: tuple[str, str], now: float) -> None:
        """A thread of agent `key` made its first call at `now`."""
        rec = self.starts.get(key)
        if rec is None:
            self.starts[key] = [now, SampleWindow()]
        else:
            rec[1].add(now - rec[0])
            rec[0] = now

    def update(self, key: tuple[str, str], profile) -> None:
        """Take the agent's anchor from its runtime profile once two workflows confirmed it."""
        n = len(profile.anchor) if profile.anchor_workflows >= 2 else 0
        old = self.of.get(key, ())
        if n != len(old):
            self._set(key, old, tuple(profile.anchor[:n]))

    def _set(self, key: tuple[str, str], old: tuple, new: tuple) -> None:
        """The agent's anchor blocks go from `old` to `new` in its tenant's table."""
        tenant, agent = key
        table = self.table.setdefault(tenant, {})
        keep = set(new)
        for h in old:
            if h not in keep and (agents := table.get(h)) is not None:
                agents.discard(agent)
                if not agents:
                    del table[h]
        for h in new:
            table.setdefault(h, set()).add(agent)
        if not table:
            del self.table[tenant]
        if new:
            self.of[key] = new
        else:
            self.of.pop(key, None)

    def density(self, tenant: str, hash_id: int) -> float | None:
        """New-thread reads per second of the block (the largest over the agents it anchors);
        None when it anchors no agent."""
        agents = self.table.get(tenant)
        agents = agents.get(hash_id) if agents else None
        if not agents:
            return None
        best = 0.0
        for a in agents:
            rec = self.starts.get((tenant, a))
            if rec is not None and rec[1].n:
                best = max(best, 1.0 / max(rec[1].mean(0.0), TINY))
        return best

    def blocks(self) -> int:
        """Anchor blocks held over all tenants."""
        return sum(len(t) for t in self.table.values())

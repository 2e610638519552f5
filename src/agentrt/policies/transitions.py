"""Online first-order Markov transitions between agents, from a sliding window of observations.

For every source agent the learner keeps its last `window` successors (the agent the same
workflow called next, or END when the workflow ended after it); P(next = j | current = i) is j's
share of i's window, so the matrix adapts when workflows drift. `reach(start, k)` runs a bounded
breadth-first search over the learned graph: for every agent within `k` hops, the probability of
the most likely path to it (a cheap stand-in for the matrix powers that give exact k-step
probabilities, as CacheSage does).
State is bounded: at most `max_sources` source agents are kept (the runtime's `max_agents`
default), so a server that sees a new system prompt per request (agents inferred from anchors)
does not grow without end. Sources keyed (tenant, agent) share the bound max-min by tenant
(`runtime/tenant_lru.py`): past it, the tenant holding the most sources loses its least recently
observed one, so a tenant inventing agents never drops another tenant's transitions. Other keys
(a learner of one tenant's agents) are one tenant: the least recently observed goes first.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Hashable

from agentrt.runtime.tenant_lru import TenantLRU

END = "<end>"


class TransitionLearner:
    def __init__(self, window: int = 8, max_sources: int = 4096) -> None:
        if window <= 0:
            raise ValueError(f"window must be > 0, got {window}")
        if max_sources <= 0:
            raise ValueError(f"max_sources must be > 0, got {max_sources}")
        self.window = window
        self.max_sources = max_sources
        # (tenant, agent) -> (its latest successors, their counts)
        self._succ = TenantLRU(max_sources)
        self.observations = 0

    @property
    def dropped_sources(self) -> int:
        return self._succ.dropped

    def observe(self, src: Hashable, dst: Hashable) -> None:
        key = _keyed(src)
        entry = self._succ.get(key)
        if entry is None:
            entry = (deque(), Counter())
            self._succ.set(key, entry)
            if key not in self._succ:    # dropped at once: a bound of one source, held by another tenant
                return
        else:
            self._succ.touch(key)
        q, c = entry
        if len(q) == self.window:
            old = q.popleft()
            c[old] -= 1
            if c[old] == 0:
                del c[old]
        q.append(dst)
        c[dst] += 1
        self.observations += 1

    def next_probs(self, src: Hashable) -> dict[Hashable, float]:
        entry = self._succ.get(_keyed(src))
        if entry is None or not entry[1]:
            return {}
        c = entry[1]
        n = sum(c.values())
        return {k: v / n for k, v in c.items()}

    def reach(self, start: Hashable, k: int) -> dict[Hashable, tuple[int, float]]:
        """Agents reachable from `start` in 1..k hops: (hops, probability of the best path)."""
        out: dict[Hashable, tuple[int, float]] = {}
        frontier = {start: 1.0}
        for hop in range(1, k + 1):
            nxt: dict[Hashable, float] = {}
            for a, p in frontier.items():
                for b, q in self.next_probs(a).items():
                    if b == END:
                        continue
                    pq = p * q
                    if pq > nxt.get(b, 0.0):
                        nxt[b] = pq
            for b, p in nxt.items():
                if b not in out or p > out[b][1]:
                    out[b] = (hop, p)
            frontier = nxt
            if not frontier:
                break
        return out

    def sources(self) -> int:
        return len(self._succ)

    def state_bytes(self) -> int:
        return sum(120 + 16 * len(q) + 60 * len(c) for q, c in self._succ.values())


_ONE = "\x00one"      # the tenant of sources not keyed (tenant, agent): a single-tenant learner


def _keyed(src: Hashable) -> tuple:
    """The bounded map's (tenant, key) for a source."""
    if type(src) is tuple and len(src) == 2 and type(src[0]) is str:
        return src
    return (_ONE, src)

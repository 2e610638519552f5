"""Online first-order Markov transitions between agents, from a sliding window of observations.

For every source agent the learner keeps its last `window` successors (the agent the same
workflow called next, or END when the workflow ended after it); P(next = j | current = i) is j's
share of i's window, so the matrix adapts when workflows drift. `reach(start, k)` runs a bounded
breadth-first search over the learned graph: for every agent within `k` hops, the probability of
the most likely path to it (a cheap stand-in for the matrix powers that give exact k-step
probabilities, as CacheSage does).
State is bounded: at most `max_sources` source agents are kept (the runtime's `max_agents`
default), the least recently observed dropped first, so a server that sees a new system prompt
per request (agents inferred from anchors) does not grow without end.
"""

from __future__ import annotations

from collections import Counter, OrderedDict, deque
from collections.abc import Hashable

END = "<end>"


class TransitionLearner:
    def __init__(self, window: int = 8, max_sources: int = 4096) -> None:
        if window <= 0:
            raise ValueError(f"window must be > 0, got {window}")
        if max_sources <= 0:
            raise ValueError(f"max_sources must be > 0, got {max_sources}")
        self.window = window
        self.max_sources = max_sources
        self._succ: OrderedDict[Hashable, deque] = OrderedDict()   # least recently observed first
        self._counts: dict[Hashable, Counter] = {}
        self.observations = 0
        self.dropped_sources = 0

    def observe(self, src: Hashable, dst: Hashable) -> None:
        q = self._succ.get(src)
        if q is None:
            q = self._succ[src] = deque()
            self._counts[src] = Counter()
            if len(self._succ) > self.max_sources:
                gone, _ = self._succ.popitem(last=False)
                del self._counts[gone]
                self.dropped_sources += 1
        else:
            self._succ.move_to_end(src)
        c = self._counts[src]
        if len(q) == self.window:
            old = q.popleft()
            c[old] -= 1
            if c[old] == 0:
                del c[old]
        q.append(dst)
        c[dst] += 1
        self.observations += 1

    def next_probs(self, src: Hashable) -> dict[Hashable, float]:
        c = self._counts.get(src)
        if not c:
            return {}
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
        return sum(120 + 16 * len(q) + 60 * len(self._counts[s]) for s, q in self._succ.items())

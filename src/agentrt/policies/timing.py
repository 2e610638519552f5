"""What PBKV-TA learns online about agents: duration windows and dropped path tails.

- `_Durations`: the latest observed durations of one kind (a service time, a gap after an
  agent's calls), their mean and mean residual time after some has passed (heavy-tailed waits).
- `_Tail`: the latest counts of blocks at the end of a thread's path that its next call did not
  reuse (`_dropped`), and P(dropped <= j) for a block j blocks above the leaf.
Both keep a bounded window (`keep`), sorted for O(log n) queries; nothing reads a clock.
"""

from __future__ import annotations

import bisect
from collections import deque

import numpy as np

TINY = 1e-6   # seconds: floor of an expected residency (a use due now is not infinitely dense)


class _Durations:
    """The latest `keep` observed durations of one kind: their mean, and the mean residual time
    E[D - e | D > e] after `e` seconds have already passed (heavy-tailed tool waits: a call that
    has waited long is likely to wait longer, so "overdue" never means "due now")."""

    __slots__ = ("recent", "ordered", "sums", "keep", "n")

    def __init__(self, keep: int = 512) -> None:
        self.recent: deque[float] = deque()
        self.ordered: list[float] = []
        self.sums: np.ndarray | None = None     # suffix sums of `ordered`, rebuilt lazily
        self.keep = keep
        self.n = 0

    def add(self, x: float) -> None:
        self.recent.append(x)
        bisect.insort(self.ordered, x)
        if len(self.recent) > self.keep:
            old = self.recent.popleft()
            del self.ordered[bisect.bisect_left(self.ordered, old)]
        self.sums = None
        self.n += 1

    def mean(self, default: float) -> float:
        return self.residual(0.0, default)

    def residual(self, elapsed: float, default: float) -> float:
        o = self.ordered
        if not o:
            return default
        if self.sums is None:
            self.sums = np.concatenate((np.cumsum(o[::-1])[::-1], [0.0]))
        i = bisect.bisect_right(o, elapsed)
        if i == len(o):          # longer than anything seen: expect as long again (no data says less)
            return elapsed
        return float(self.sums[i]) / (len(o) - i) - elapsed


def _dropped(leaf, hash_ids) -> int:
    """Blocks at the end of the path to `leaf` that a prompt with `hash_ids` does not reuse."""
    path = []
    node = leaf
    while node is not None and node.parent is not None:
        path.append(node.hash)
        node = node.parent
    path.reverse()
    common = 0
    for a, b in zip(path, hash_ids):
        if a != b:
            break
        common += 1
    return len(path) - common


class _Tail(_Durations):
    """The latest `keep` observed counts of blocks at the end of a thread's path that its next
    call did not reuse; `kept(j)`: the share of them that would have kept the block `j` blocks
    above the leaf (P(dropped <= j))."""

    __slots__ = ()

    def kept(self, j: int) -> float:
        if j < 0:
            return 1.0
        return bisect.bisect_right(self.ordered, j) / len(self.ordered)

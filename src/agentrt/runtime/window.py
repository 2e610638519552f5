"""A sliding window of samples with their mean residual life, learned online.

Model: the latest `keep` samples of one quantity (a call's service time, the gap after an
agent's calls, a workflow's total work), kept sorted, so that E[X - a | X > a], the mean of what
is left once `a` has been observed, is one bisection plus suffix sums (rebuilt lazily after an
`add`). With no sample above `a` the answer is `a` itself: a wait or a workflow longer than any
seen is expected to last as long again (heavy tails), which for scheduling is least attained
service. Policies (PBKV-TA's timing) and schedulers (`agent`'s remaining work) share it; nothing
reads a clock.
"""

from __future__ import annotations

import bisect
from collections import deque

import numpy as np

from agentrt.runtime.tenant_lru import TenantLRU

# policies' per-agent tables (PBKV-TA's durations, tails and anchors, CacheSage's warm-ups) keep
# at most this many keys, the oldest dropped first: twice the runtime's agent profiles, so real
# agents are never dropped while a client inventing agent ids cannot grow them without bound
MAX_AGENT_KEYS = 16_384


class SampleWindow:
    """The latest `keep` samples, sorted; `n` counts every sample ever added."""

    __slots__ = ("recent", "ordered", "sums", "logs", "keep", "n")

    def __init__(self, keep: int = 512) -> None:
        self.recent: deque[float] = deque()
        self.ordered: list[float] = []
        self.sums: np.ndarray | None = None     # suffix sums of `ordered`, rebuilt lazily
        self.logs: np.ndarray | None = None     # log(max(x, floor)) of `ordered`, rebuilt lazily
        self.keep = keep
        self.n = 0

    def add(self, x: float) -> None:
        self.recent.append(x)
        bisect.insort(self.ordered, x)
        if len(self.recent) > self.keep:
            old = self.recent.popleft()
            del self.ordered[bisect.bisect_left(self.ordered, old)]
        self.sums = None
        self.logs = None
        self.n += 1

    def __len__(self) -> int:
        return len(self.recent)

    def log_values(self, floor: float) -> np.ndarray:
        """log(max(x, floor)) of the window's samples, ascending (cached until the next `add`)."""
        if self.logs is None:
            self.logs = np.log(np.maximum(np.asarray(self.ordered, dtype=float), floor))
        return self.logs

    def mean(self, default: float) -> float:
        return self.residual(0.0, default)

    def residual(self, elapsed: float, default: float) -> float:
        """E[X - elapsed | X > elapsed] over the window; `default` when it is empty, `elapsed`
        when no sample is larger."""
        o = self.ordered
        if not o:
            return default
        i = bisect.bisect_right(o, elapsed)
        if i == len(o):
            return float(elapsed)
        if self.sums is None:
            self.sums = np.concatenate((np.cumsum(o[::-1])[::-1], [0.0]))
        return float(self.sums[i]) / (len(o) - i) - elapsed


class TenantKeyed(dict):
    """A dict keyed by tuples whose first item is a tenant, holding at most `max_keys`: past it,
    the tenant with the most keys loses its oldest (max-min by tenant, `tenant_lru.py`), so a
    tenant inventing agents never drops another tenant's entries. Reads are a dict's; writes go
    through `[]=`, `pop` and `del`. `on_drop(key, value)` is told of each key the bound drops."""

    __slots__ = ("_order", "_on_drop")

    def __init__(self, max_keys: int, on_drop=None) -> None:
        super().__init__()
        self._on_drop = on_drop
        self._order = TenantLRU(max_keys, on_drop=self._dropped)

    def _dropped(self, _tenant: str, key, _value) -> None:
        value = dict.pop(self, key)
        if self._on_drop is not None:
            self._on_drop(key, value)

    def __setitem__(self, key, value) -> None:
        dict.__setitem__(self, key, value)
        self._order.set((key[0], key), None)

    def pop(self, key, *default):
        self._order.pop((key[0], key))
        return dict.pop(self, key, *default)

    def __delitem__(self, key) -> None:
        self.pop(key)


def window_in(table: dict, key, max_keys: int, make) -> SampleWindow:
    """`table[key]`, made by `make()` when absent; the oldest key is dropped first when the table
    already holds `max_keys` (per-class windows stay bounded). A `TenantKeyed` table bounds
    itself, max-min by tenant."""
    w = table.get(key)
    if w is None and isinstance(table, TenantKeyed):
        w = table[key] = make()
        return w
    if w is None:
        if len(table) >= max_keys:
            table.pop(next(iter(table)))
        w = table[key] = make()
    return w

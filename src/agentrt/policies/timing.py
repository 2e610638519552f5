"""What PBKV-TA learns online about agents: duration windows and dropped path tails.

- Durations of one kind (a service time, a gap after an agent's calls) are a `SampleWindow`
  (`runtime/window.py`): their mean and mean residual time after some has passed (heavy-tailed
  waits: a call that has waited long is likely to wait longer, so "overdue" never means "due now").
- `thread_density`: a thread's expected hits per second of residency from the predictor's step
  probabilities and the expected step times.
- `_Tail`: the latest counts of blocks at the end of a thread's path that its next call did not
  reuse (`_dropped`), and P(dropped <= j) for a block j blocks above the leaf.
Both keep a bounded window (`keep`), sorted for O(log n) queries; nothing reads a clock.
"""

from __future__ import annotations

import bisect

import numpy as np

from agentrt.runtime.window import SampleWindow

TINY = 1e-6   # seconds: floor of an expected residency (a use due now is not infinitely dense)


def thread_density(p: np.ndarray, rel: np.ndarray) -> np.ndarray:
    """Hit density of each agent's thread: `p[k, a]` the predictor's joint P(step k+1 is a's call),
    `rel[k]` seconds from now to step k+1 (K+1 entries, the last past the horizon). With f_k the
    chance the thread is first used at step k and F their sum, the density is F over the expected
    residency sum_k f_k rel_k + (1 - F) rel_K (kept to the horizon if unused)."""
    first = p.copy()
    first[1:] *= np.cumprod(1.0 - p, axis=0)[:-1]
    f_total = first.sum(axis=0)
    life = first.T @ rel[:-1] + (1.0 - f_total) * rel[-1]
    return f_total / np.maximum(life, TINY)


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


class _Tail(SampleWindow):
    """The latest `keep` observed counts of blocks at the end of a thread's path that its next
    call did not reuse; `kept(j)`: the share of them that would have kept the block `j` blocks
    above the leaf (P(dropped <= j))."""

    __slots__ = ()

    def kept(self, j: int) -> float:
        if j < 0:
            return 1.0
        return bisect.bisect_right(self.ordered, j) / len(self.ordered)

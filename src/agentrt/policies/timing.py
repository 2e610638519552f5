"""What PBKV-TA learns online about agents: duration windows and dropped path tails.

- Durations of one kind (a service time, a gap after an agent's calls) are a `SampleWindow`
  (`runtime/window.py`): their mean and mean residual time after some has passed (heavy-tailed
  waits: a call that has waited long is likely to wait longer, so "overdue" never means "due now").
- `_Tail`: the latest counts of blocks at the end of a thread's path that its next call did not
  reuse (`_dropped`), and P(dropped <= j) for a block j blocks above the leaf.
Both keep a bounded window (`keep`), sorted for O(log n) queries; nothing reads a clock.
"""

from __future__ import annotations

import bisect

from agentrt.runtime.window import SampleWindow

TINY = 1e-6   # seconds: floor of an expected residency (a use due now is not infinitely dense)


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

"""The chain rule of hash ids: an id stands for its whole prefix, so it has one predecessor.

TRACE_FORMAT.md: "two prompts that share the id at position i share all blocks 0..i". Hence an id
appears at most once in a prompt, and every appearance of an id (within one tenant: tenants never
share blocks) follows the same id, or starts the prompt every time. `output_hash_ids` continue the
chain from the prompt's last full block. A trace that breaks this would make a prefix cache hit
on blocks the prompts do not share, so the reader rejects it.

Memory is bounded: the predecessor of at most `CHAIN_IDS` distinct ids is remembered per reading
pass; past that the record starts afresh, so two conflicting uses further apart than that in a
huge trace may go unnoticed (documented in docs/traces.md).
"""

from __future__ import annotations

from collections.abc import Sequence

from agentrt.trace.limits import show

CHAIN_IDS = 1 << 19      # 524,288 ids remembered (tens of MB at most)
_START = None            # the predecessor of an id at position 0


def _repeated(ids: list[int]) -> str:
    first: dict[int, int] = {}
    for i, h in enumerate(ids):
        if h in first:
            break
        first[h] = i
    return (f"id {show(h)} appears at positions {first[h]} and {i}; ids are chained (an id stands "
            f"for its whole prefix), so one sequence cannot repeat an id")


class ChainCheck:
    """Checks the hash ids of successive calls; `check` returns (field, message) or None."""

    __slots__ = ("_pred", "_size")

    def __init__(self) -> None:
        self._pred: dict[str, dict[int, int | None]] = {}
        self._size = 0

    def check(self, tenant: str, hids: list[int], n_full: int,
              ohids: list[int]) -> tuple[str, str] | None:
        for field, ids in (("hash_ids", hids), ("output_hash_ids", ohids)):
            if len(set(ids)) != len(ids):
                return field, _repeated(ids)
        if self._size > CHAIN_IDS:
            self._pred.clear()
            self._size = 0
        pred = self._pred.get(tenant)
        if pred is None:
            pred = self._pred[tenant] = {}
        before = len(pred)
        bad = self._walk(pred, hids, _START)
        if bad is None and ohids:
            bad = self._walk(pred, ohids, hids[n_full - 1] if n_full > 0 else _START)
            field = "output_hash_ids"
        else:
            field = "hash_ids"
        self._size += len(pred) - before
        if bad is None:
            return None
        i, h, prev, known = bad
        here = "starts the sequence" if prev is _START else f"follows id {show(prev)}"
        there = "started a prompt" if known is _START else f"followed id {show(known)}"
        return field, (f"id {show(h)} at position {i} {here}, but earlier in the file it {there}; "
                       f"ids are chained, so one id always has the same predecessor")

    @staticmethod
    def _walk(pred: dict, ids: list[int], prev: int | None):
        prevs = [prev]
        prevs += ids[:-1]
        known = list(map(pred.setdefault, ids, prevs))   # records new ids, returns known ones
        if known == prevs:
            return None
        for i, (h, k, p) in enumerate(zip(ids, known, prevs)):
            if k != p:
                return i, h, p, k
        return None


def shared_blocks(a: Sequence[int], b: Sequence[int], limit: int) -> int:
    """Blocks two chained prompts share, among their first `limit` (chained ids: equal at i means
    equal at every j < i, so a bisection finds it)."""
    lo, hi = 0, min(len(a), len(b), limit)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[mid - 1] == b[mid - 1]:
            lo = mid
        else:
            hi = mid - 1
    return lo

"""Workflows waiting between calls, grouped by where they wait, for a warm-up scan whose work per
call is bounded however many agent ids clients invent.

Model
- A workflow waiting between calls sits at its start s = (tenant, agent of its latest call): it
  joins s's group when it goes idle and leaves it when its next call arrives or it ends. Groups
  keep their members in the order they went idle, so a group's first member is its longest idle.
- Per tenant, the starts with idle workflows sit in a heap ordered by their longest-idle member
  (lazy deletion: an entry is current while its start's first member is the one it was pushed for;
  stale entries are dropped when met and all heaps are rebuilt once they outnumber the groups).
- `scan(judge, ...)` asks `judge(start)` about starts until one gives a result. The judge answers
  a result, None ("blocked": nothing now, maybe later: the agent is being warmed, its anchor is
  cached) or `BARREN` (nothing can come of this start until what the policy learned from it
  changes). A barren start is parked: it leaves the heap until `revive(start)`. An invented agent
  id, from which nothing was learned, is barren: it costs one visit when it first goes idle, not
  one per scan.
- Tenants take turns: the scan visits tenants in round-robin order, within a tenant its starts
  longest-idle first, at most `tenant_visits` starts of one tenant and `max_visits` in all. Every
  tenant it visited goes to the back of the turn, so one tenant's idle workflows (however many)
  never hold back another tenant's warm-ups, and a scan costs O(max_visits log n).
Nothing reads a clock.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

Start = tuple[str, str]            # (tenant, agent)
BARREN = object()                  # a judge's answer: park this start until it is revived


class IdleStarts:
    __slots__ = ("groups", "of", "_heaps", "_turn", "_parked", "_seq", "_entries")

    def __init__(self) -> None:
        self.groups: dict[Start, dict[Hashable, int]] = {}     # start -> {workflow key: seq}
        self.of: dict[Hashable, Start] = {}                    # idle workflow -> its start, in idle order
        self._heaps: dict[str, list[tuple[int, Start]]] = {}   # tenant -> (first seq, start) heap
        self._turn: OrderedDict[str, None] = OrderedDict()     # tenants with heap entries, next first
        self._parked: set[Start] = set()                       # barren starts (with a group)
        self._seq = 0
        self._entries = 0                                      # heap entries, stale ones included

    def __len__(self) -> int:
        return len(self.groups)

    def join(self, wf: Hashable, start: Start) -> None:
        """Workflow `wf` went idle at `start` (a no-op if it already waits)."""
        if wf in self.of:
            return
        self._seq += 1
        group = self.groups.get(start)
        new = group is None
        if new:
            group = self.groups[start] = {}
        group[wf] = self._seq
        self.of[wf] = start
        if new:                           # (after the member is in: a push may rebuild the heaps)
            self._push(start, self._seq)

    def leave(self, wf: Hashable) -> None:
        """Workflow `wf` stopped waiting (its next call came, or it ended)."""
        start = self.of.pop(wf, None)
        if start is None:
            return
        group = self.groups[start]
        first = next(iter(group)) == wf
        del group[wf]
        if not group:
            del self.groups[start]
            self._parked.discard(start)
        elif first and start not in self._parked:
            self._push(start, next(iter(group.values())))

    def revive(self, start: Start) -> None:
        """What the policy learned from `start` changed: a parked start is scanned again."""
        if start in self._parked:
            self._parked.discard(start)
            self._push(start, next(iter(self.groups[start].values())))

    def parked(self, start: Start) -> bool:
        return start in self._parked

    def scan(self, judge: Callable[[Start], Any], max_visits: int, tenant_visits: int) -> tuple[Any, int]:
        """(the first result a judge gave, or None; starts visited). See the module docstring."""
        visits, found = 0, None
        keep: list[tuple[str, tuple[int, Start]]] = []
        seen: set[Start] = set()
        for tenant in list(self._turn):
            if visits >= max_visits or found is not None:
                break
            heap = self._heaps[tenant]
            n = 0
            while heap and n < tenant_visits and visits < max_visits:
                entry = heapq.heappop(heap)
                self._entries -= 1
                start = entry[1]
                if start in seen or not self._current(entry):
                    continue
                seen.add(start)
                n += 1
                visits += 1
                got = judge(start)
                if got is BARREN:
                    self._parked.add(start)
                    continue
                keep.append((tenant, entry))
                if got is not None:
                    found = got
                    break
            self._turn.move_to_end(tenant)
        for tenant, entry in keep:
            heapq.heappush(self._heaps[tenant], entry)
            self._entries += 1
        for tenant in [t for t in self._turn if not self._heaps[t]]:
            del self._turn[tenant], self._heaps[tenant]
        return found, visits

    # ---------------------------------------------------------------- internals
    def _current(self, entry: tuple[int, Start]) -> bool:
        seq, start = entry
        group = self.groups.get(start)
        return group is not None and start not in self._parked and next(iter(group.values())) == seq

    def _push(self, start: Start, seq: int) -> None:
        tenant = start[0]
        heap = self._heaps.get(tenant)
        if heap is None:
            heap = self._heaps[tenant] = []
            self._turn[tenant] = None
        heapq.heappush(heap, (seq, start))
        self._entries += 1
        if self._entries > 2 * len(self.groups) + 1024:
            self._rebuild()

    def _rebuild(self) -> None:
        """Drop every stale heap entry at once (amortised over the pushes that made them)."""
        heaps: dict[str, list[tuple[int, Start]]] = {}
        for start, group in self.groups.items():
            if start not in self._parked:
                heaps.setdefault(start[0], []).append((next(iter(group.values())), start))
        for heap in heaps.values():
            heapq.heapify(heap)
        self._turn = OrderedDict((t, None) for t in self._turn if t in heaps)
        self._turn.update((t, None) for t in heaps)
        self._heaps = heaps
        self._entries = sum(len(h) for h in heaps.values())

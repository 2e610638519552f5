"""How many blocks a tenant's running calls may need at once: the peak over its open workflows' lifetime.

Model (`fair.py`'s demand of another tenant: its cached blocks plus this peak)
- At each admission of a tenant's call the scheduler notes the blocks the tenant's running calls
  then span (`note`). The peak that counts is the largest noted since the tenant's oldest open
  workflow started: every workflow that ran at an older peak has ended, so that peak says
  nothing about what the open ones need. Before, the peak was kept until the tenant had no
  workflow open at all, so a tenant whose workflows overlap without pause (a steady stream of
  sessions) kept reserving its largest burst forever.
- Order is by a counter the notes and workflow starts share, not by time (nothing here reads a
  clock). Each tenant keeps a max-queue: notes in order with strictly decreasing blocks, the
  ones older than its oldest open workflow dropped from the front, so the front is the peak.
  A queue holds at most one entry per distinct block count (at most the pool's blocks), and a
  tenant with no open workflow keeps nothing.
"""

from __future__ import annotations

from collections import deque


class RunningPeaks:
    __slots__ = ("open", "_notes", "_stamp")

    def __init__(self) -> None:
        # tenant -> its open workflows -> start stamp (oldest first); `fair` reads it as its live set
        self.open: dict[str, dict[str, int]] = {}
        self._notes: dict[str, deque[tuple[int, int]]] = {}  # tenant -> (stamp, blocks), blocks decreasing
        self._stamp = 0

    def opened(self, tenant: str, workflow: str) -> None:
        """A call of `workflow` arrived (a workflow already open keeps its start)."""
        flows = self.open.setdefault(tenant, {})
        if workflow not in flows:
            self._stamp += 1
            flows[workflow] = self._stamp

    def closed(self, tenant: str, workflow: str) -> None:
        """`workflow` ended; the tenant's peaks older than its oldest open workflow go."""
        flows = self.open.get(tenant)
        if flows is None or flows.pop(workflow, None) is None:
            return
        if not flows:
            del self.open[tenant]
            self._notes.pop(tenant, None)
            return
        self._trim(tenant, next(iter(flows.values())))

    def note(self, tenant: str, blocks: int) -> None:
        """The tenant's running calls span `blocks` at an admission."""
        if tenant not in self.open:
            return                       # warm-up or a call outside any open workflow: no demand kept
        self._stamp += 1
        q = self._notes.setdefault(tenant, deque())
        while q and q[-1][1] <= blocks:
            q.pop()
        q.append((self._stamp, blocks))

    def get(self, tenant: str) -> int:
        """The tenant's peak since its oldest open workflow started (0 if none noted)."""
        q = self._notes.get(tenant)
        return q[0][1] if q else 0

    def _trim(self, tenant: str, oldest: int) -> None:
        q = self._notes.get(tenant)
        if q is None:
            return
        while q and q[0][0] < oldest:
            q.popleft()
        if not q:
            del self._notes[tenant]

    def __contains__(self, tenant: str) -> bool:
        return tenant in self._notes

    def noted(self) -> int:
        """Peaks held over all tenants."""
        return sum(len(q) for q in self._notes.values())

    def __len__(self) -> int:
        """Entries held: open workflows and noted peaks."""
        return sum(len(f) for f in self.open.values()) + self.noted()

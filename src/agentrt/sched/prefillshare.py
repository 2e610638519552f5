"""Weighted per-tenant shares of each iteration's prefill budget: start-time fair queueing of chunks.

Model
- Every admitted call's prefill is a run of tokens in its tenant's virtual clock: when it is
  admitted it starts at the tenant's clock, which then advances by the call's prefill tokens /
  weight (its uncached prompt; warm-ups too, since their prefill takes the same budget). A
  tenant's calls therefore occupy consecutive stretches of its clock, in admission order.
- A call's chunk in an iteration is tagged with the virtual time of its next token: its start
  plus (tokens it has prefilled) / weight. Chunks go in tag order (ties: fewer tokens left
  first), so each iteration's budget goes first to the tenant that has been served least,
  relative to its weight: a tenant with little backlog gets its chunk ahead of a burst's, and
  tenants that all have work alternate in proportion to their weights (WFQ/DRR on tokens). The
  tag is a function of the call's start and its `prefill_left`, so a sort is consistent.
- A tenant with no call prefilling re-enters at the system's virtual time: the smallest next
  token tag among the calls prefilling (as seen at the latest ordering; their start when not
  yet seen), or, when none prefills, the largest clock. An idle tenant banks no credit, and it
  is never queued behind the whole of another tenant's admitted work.
- A call admitted again after a preemption starts at the system's virtual time and is not
  charged (the recomputation is the engine's cost, not the tenant's demand); its tag stays at
  its start until its prefill is done. Calls the clock has not seen admitted (served without a
  cache lease) go at their tenant's clock.
Bound: a call's last token is served once every token tagged before it is: its tenant's
earlier-admitted prefill and its own (W tokens), and of every other tenant g at most
W * w_g / w plus one chunk (a budget). No tenant is starved, whatever the others' backlog or
waits, and no constant is involved beyond the weights.
"""

from __future__ import annotations

from collections.abc import Callable


class PrefillShares:
    __slots__ = ("weight", "clock", "start", "work", "head", "owner", "prefilling")

    def __init__(self, weight: Callable[[str], float]) -> None:
        self.weight = weight                       # tenant -> weight (> 0)
        self.clock: dict[str, float] = {}          # tenant -> virtual time of its next admitted token
        self.start: dict[int, float] = {}          # prefilling call -> its start
        self.work: dict[int, int | None] = {}      # prefilling call -> prefill tokens (None: not charged)
        self.head: dict[int, float] = {}           # prefilling call -> its latest next-token tag
        self.owner: dict[int, str] = {}            # prefilling call -> its tenant
        self.prefilling: dict[str, int] = {}       # tenant -> its calls prefilling

    def system_time(self) -> float:
        """Where a tenant with nothing prefilling re-enters."""
        if self.start:
            return min(self.head.get(rid, s) for rid, s in self.start.items())
        return max(self.clock.values(), default=0.0)

    def admit(self, rid: int, tenant: str, work: int | None) -> None:
        """A call admitted with `work` prefill tokens to compute (None: a resumed call, uncharged)."""
        if rid in self.start:
            self.done(rid)
        v = self.system_time()
        clock = self.clock.get(tenant, 0.0)
        if not self.prefilling.get(tenant):
            clock = max(clock, v)
        if work is None:
            s = v
        else:
            s = clock
            clock += work / self.weight(tenant)
        self.clock[tenant] = clock
        self.start[rid] = s
        self.work[rid] = work
        self.owner[rid] = tenant
        self.prefilling[tenant] = self.prefilling.get(tenant, 0) + 1

    def done(self, rid: int) -> None:
        """The call's prefill is over (its prompt is cached, it finished or left)."""
        if self.start.pop(rid, None) is not None:
            self.work.pop(rid, None)
            self.head.pop(rid, None)
            tenant = self.owner.pop(rid)
            n = self.prefilling[tenant] - 1
            if n:
                self.prefilling[tenant] = n
            else:
                del self.prefilling[tenant]

    def tag(self, rid: int, tenant: str, prefill_left: int) -> float:
        """Virtual time of the call's next prefill token (remembered for `system_time`)."""
        s = self.start.get(rid)
        if s is None:
            return self.clock.get(tenant, 0.0)
        w = self.work[rid]
        t = s if w is None else s + max(0, w - prefill_left) / self.weight(tenant)
        self.head[rid] = t
        return t

    def forget(self, tenants) -> set[str]:
        """Drop the clocks of `tenants` (gone: no call in flight) that re-entering would lift to
        the system's virtual time anyway, so nothing is lost; the ones dropped."""
        idle = (t for t in tenants if not self.prefilling.get(t))
        # nothing prefills: re-entry is at the largest clock, which stays
        gone = passed(self.clock, idle, self.system_time(), strict=not self.start)
        for t in gone:
            self.clock.pop(t, None)
        return gone

    def state_bytes(self) -> int:
        return 120 * len(self.clock) + 200 * len(self.start)


def passed(clocks: dict[str, float], tenants, floor: float, strict: bool) -> set[str]:
    """Of `tenants`, those whose clock re-entry would lift to `floor` anyway: none, or one at or
    below it (below it when `strict`: `floor` is then the largest clock itself, which must stay)."""
    return {t for t in tenants if t not in clocks or (clocks[t] < floor if strict else clocks[t] <= floor)}

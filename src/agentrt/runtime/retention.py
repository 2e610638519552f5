"""Retention: floors that clients put under a policy's eviction order, within a budget.

Model
- An entry says: keep `node` for `owner` at `priority` (1..100) until `deadline`. An owner is
  (tenant, name): `retain:<scope>` for a `kv.retain` hint (the request's workflow when the hint
  names no scope), `claim:<claim_id>` for a `vllm.set_priority` claim. A block's retention
  priority is the highest over its live entries, 0 (unretained) without one; a block takes at
  most `MAX_OWNERS` owners. The wrapper (`floor.py`) ranks retained blocks after unretained ones,
  lower priority first, the policy's own order within each.
- Budget: at most `fraction` of the pool's `capacity` blocks are retained at once (distinct
  blocks), and a tenant at most its share of that: budget * w_t / (sum of w over the tenants
  holding retention, itself included), weights as the tenant shares' (1 each by default). A
  tenant is charged once per block, however many of its owners name it.
- A hint is applied to the request's blocks first to last (chain order, block j = tokens
  [j * block_size, (j + 1) * block_size)). Each block takes the first span overlapping it.
  Priority 0 releases the owner's entry; otherwise the entry is set (a renewal takes the new
  deadline; `duration` None or over `max_s` is capped at `max_s`). A new block that does not
  fit makes room by revoking entries of the tenant most over its own share, earliest deadline
  first; if no tenant is over, the walk stops there (a later block is no use without its
  predecessors): `clipped` when some blocks were taken, else rejected (`over_budget`,
  `over_tenant_share`).
- `vllm.set_priority` claims (`claim`): revisioned per (tenant, claim_id). A higher revision
  replaces the claim (its entries are released first); the same revision with the same payload
  adds the request's blocks it does not hold yet without renewing the others; a lower one is
  `stale_revision`, the same one with another payload `conflict`. A value above 0 retains the
  request's cached blocks at priority min(value, 100) for `ttl_seconds`; a value <= 0 or a
  cleared claim (null) is recorded only (the floor never ranks blocks below the policy's order).
- Entries lapse at their deadline (`expire(now)`: time is passed in), are released by their
  owner (priority 0, a cleared or replaced claim, the owner's workflow ending) or leave with
  their block (`drop`: retention orders eviction and never pins memory; vLLM takes a retained
  block when nothing else is free).
- `changes` moves whenever a block's retention may have changed: the wrapper bumps its epoch.
Cost: O(blocks of the request) to apply a hint; O(log n) per entry to expire. A renewal leaves a
stale heap record, dropped when popped; the heaps are rebuilt when stale records outnumber live
entries 4 to 1. Outcomes are counted per hint (`HINT_OUTCOMES`, `REJECT_REASONS`) and per block
(`BLOCK_EVENTS`).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

MAX_OWNERS = 16          # owners a block may be retained by (as upstream's claims per block)
MAX_CLAIM_RECORDS = 65536
HINT_OUTCOMES = ("accepted", "clipped", "recorded")
REJECT_REASONS = ("malformed", "unknown_version", "too_many", "off", "empty", "aborted",
                  "over_budget", "over_tenant_share", "too_many_owners", "stale_revision", "conflict")
BLOCK_EVENTS = ("expired", "released", "revoked", "evicted")


@dataclass(frozen=True, slots=True)
class Span:
    """One directive: tokens [start, end) of the request (end None: to its end), or with `output`
    its generated tail; `priority` 0 releases; `duration` seconds (None: the ledger's cap)."""
    start: int
    end: int | None
    priority: int
    duration: float | None
    output: bool = False


@dataclass(frozen=True, slots=True)
class RetainHint:
    scope: str | None
    spans: tuple[Span, ...]


@dataclass(frozen=True, slots=True)
class PriorityClaim:
    claim_id: str
    revision: int
    value: int | None
    ttl_s: float | None


def plan(spans, n: int, block_size: int, prompt_tokens: int) -> list:
    """Per block of an `n`-block request, the (priority, duration) of the first span overlapping it."""
    out: list = [None] * n
    for s in spans:
        start, end = (prompt_tokens, None) if s.output else (s.start, s.end)
        hi = n if end is None else min(n, -(-end // block_size))
        for j in range(start // block_size, hi):
            if out[j] is None:
                out[j] = (s.priority, s.duration)
    return out


class Retention:
    def __init__(self, capacity: int = 0, fraction: float = 0.25, max_s: float = 3600.0,
                 weights: dict[str, float] | None = None) -> None:
        if not 0.0 <= fraction <= 1.0:
            raise ValueError(f"retain_budget must be in [0, 1], got {fraction}")
        if not max_s > 0:
            raise ValueError(f"retain_max_s must be > 0, got {max_s}")
        self.capacity = capacity          # the pool's blocks (vLLM's is known once bound)
        self.fraction = fraction
        self.max_s = float(max_s)
        self.weights = dict(weights or {})
        self.entries: dict = {}           # node -> {owner: (priority, deadline, seq)}
        self.owned: dict = {}             # owner -> set of nodes
        self.held: dict[str, int] = {}    # tenant -> blocks it retains
        self._heap: list = []             # (deadline, seq, node, owner): every entry, for expiry
        self._theap: dict[str, list] = {}  # the same per tenant, for revocation
        self._claims: dict = {}           # owner -> (revision, value, ttl) of set_priority claims
        self._seq = 0
        self.changes = 0
        self.counts = dict.fromkeys(HINT_OUTCOMES + BLOCK_EVENTS, 0)
        self.counts.update(("rejected_" + r, 0) for r in REJECT_REASONS)

    @property
    def budget(self) -> int:
        return int(self.capacity * self.fraction)

    def __len__(self) -> int:
        return len(self.entries)

    def priority(self, node) -> int:
        d = self.entries.get(node)
        return max(e[0] for e in d.values()) if d else 0

    def reject(self, reason: str) -> str:
        self.counts["rejected_" + reason] += 1
        return "rejected:" + reason

    def cap(self, tenant: str, asking: str | None = None) -> float:
        """The most blocks `tenant` may retain: its weighted part of the budget among the tenants
        holding retention, itself and the one `asking` for room."""
        w = self.weights
        names = set(self.held) | {tenant}
        if asking is not None:
            names.add(asking)
        if len(names) == 1:
            return float(self.budget)
        return self.budget * w.get(tenant, 1.0) / sum(w.get(t, 1.0) for t in names)

    # ------------------------------------------------------------------ applying hints
    def retain(self, tenant: str, name: str, nodes: list, spans, block_size: int,
               prompt_tokens: int, now: float) -> str:
        """Apply one kv.retain hint of `owner` = (tenant, name) to a request's blocks `nodes`
        (first to last). Returns the outcome: accepted, clipped or rejected:<reason>."""
        if self.budget <= 0:
            return self.reject("off")
        steps = plan(spans, len(nodes), block_size, prompt_tokens)
        if all(p is None for p in steps):
            return self.reject("empty")
        owner = (tenant, name)
        taken, stopped = 0, None
        for node, p in zip(nodes, steps):
            if p is None:
                continue
            if p[0] == 0:
                self._remove(node, owner, "released")
                continue
            stopped = self._set(node, owner, p[0], now + min(self.max_s, p[1] if p[1] is not None else self.max_s))
            if stopped is not None:
                break
            taken += 1
        return self._outcome(taken, stopped)

    def claim(self, tenant: str, c: PriorityClaim, nodes: list, now: float) -> str:
        """Apply one vllm.set_priority claim to a request's cached blocks `nodes`."""
        owner = (tenant, "claim:" + c.claim_id)
        rec = self._claims.get(owner)
        if rec is not None and c.revision < rec[0]:
            return self.reject("stale_revision")
        if rec is not None and c.revision == rec[0] and (c.value, c.ttl_s) != rec[1:]:
            return self.reject("conflict")
        renew = rec is None or c.revision > rec[0]
        if renew:
            self.release_owner(owner)
            self._claims.pop(owner, None)
            if len(self._claims) >= MAX_CLAIM_RECORDS:
                self._claims.pop(next(iter(self._claims)))
            self._claims[owner] = (c.revision, c.value, c.ttl_s)
        if c.value is None or c.value <= 0:
            self.counts["recorded"] += 1
            return "recorded"
        if self.budget <= 0:
            return self.reject("off")
        if not nodes:
            return self.reject("empty")
        deadline = now + min(self.max_s, c.ttl_s)
        taken, stopped, mine = 0, None, self.owned.get(owner, ())
        for node in nodes:
            if node in mine:                 # the same revision renews nothing
                continue
            stopped = self._set(node, owner, min(c.value, 100), deadline)
            if stopped is not None:
                break
            taken += 1
        return self._outcome(taken, stopped)

    def _outcome(self, taken: int, stopped: str | None) -> str:
        self.changes += 1
        if stopped is not None and taken == 0:
            return self.reject(stopped)
        outcome = "clipped" if stopped is not None else "accepted"
        self.counts[outcome] += 1
        return outcome

    # ------------------------------------------------------------------ entries
    def _set(self, node, owner, priority: int, deadline: float) -> str | None:
        """Set one entry; the reason it does not fit, else None."""
        d = self.entries.get(node)
        if d is not None and owner in d:
            self._put(d, node, owner, priority, deadline)
            return None
        if d is not None and len(d) >= MAX_OWNERS:
            return "too_many_owners"
        tenant = owner[0]
        first = d is None or not any(o[0] == tenant for o in d)
        if first and self.held.get(tenant, 0) + 1 > self.cap(tenant):
            return "over_tenant_share"
        if d is None and len(self.entries) >= self.budget and not self._make_room(tenant):
            return "over_budget"
        if d is None:
            d = self.entries[node] = {}
        if first:
            self.held[tenant] = self.held.get(tenant, 0) + 1
        self.owned.setdefault(owner, set()).add(node)
        self._put(d, node, owner, priority, deadline)
        return None

    def _put(self, d: dict, node, owner, priority: int, deadline: float) -> None:
        self._seq += 1
        d[owner] = (priority, deadline, self._seq)
        heapq.heappush(self._heap, (deadline, self._seq, node, owner))
        # revocation takes the earliest deadline, and of equal ones the block set last (the
        # deepest of its chain: a chain cut at its start is of no use)
        heapq.heappush(self._theap.setdefault(owner[0], []), (deadline, -self._seq, node, owner))
        if len(self._heap) > 4 * len(self.entries) + 1024:
            self._compact()

    def _live(self, rec) -> bool:
        e = self.entries.get(rec[2], {}).get(rec[3])
        return e is not None and e[2] == abs(rec[1])

    def _remove(self, node, owner, why: str | None) -> int:
        d = self.entries.get(node)
        if d is None or d.pop(owner, None) is None:
            return 0
        tenant = owner[0]
        mine = self.owned.get(owner)
        if mine is not None:
            mine.discard(node)
            if not mine:
                del self.owned[owner]
        if not any(o[0] == tenant for o in d):
            self._unhold(tenant)
        if not d:
            del self.entries[node]
        if why is not None:
            self.counts[why] += 1
        return 1

    def _unhold(self, tenant: str) -> None:
        n = self.held.get(tenant, 0) - 1
        if n > 0:
            self.held[tenant] = n
        else:
            self.held.pop(tenant, None)
            self._theap.pop(tenant, None)

    def _make_room(self, tenant: str) -> bool:
        """Revoke entries of tenants over their own share until one more block fits."""
        while len(self.entries) >= self.budget:
            caps = {t: self.cap(t, tenant) for t in self.held if t != tenant}
            over = [(n - caps[t], t) for t, n in self.held.items() if t != tenant and n > caps[t]]
            if not over:
                return False
            heap = self._theap.get(max(over)[1], [])
            while heap and not self._live(heap[0]):
                heapq.heappop(heap)
            if not heap:
                return False
            _, _, node, owner = heapq.heappop(heap)
            self._remove(node, owner, "revoked")
        return True

    def _compact(self) -> None:
        self._heap = [(e[1], e[2], node, o) for node, d in self.entries.items() for o, e in d.items()]
        heapq.heapify(self._heap)
        self._theap = {}
        for d, seq, node, o in self._heap:
            self._theap.setdefault(o[0], []).append((d, -seq, node, o))
        for h in self._theap.values():
            heapq.heapify(h)

    # ------------------------------------------------------------------ lapses and removals
    def expire(self, now: float) -> int:
        """Drop the entries whose deadline has passed; returns how many."""
        heap, n = self._heap, 0
        while heap and heap[0][0] <= now:
            rec = heapq.heappop(heap)
            if self._live(rec):
                n += self._remove(rec[2], rec[3], "expired")
        if n:
            self.changes += 1
        return n

    def release_owner(self, owner) -> int:
        n = sum(self._remove(node, owner, "released") for node in list(self.owned.get(owner, ())))
        if n:
            self.changes += 1
        return n

    def drop(self, node) -> None:
        """`node` left the GPU: its entries go with it."""
        d = self.entries.get(node)
        if not d:
            return
        for owner in list(d):
            self._remove(node, owner, None)
        self.counts["evicted"] += 1

    def clear(self) -> None:
        self.entries.clear()
        self.owned.clear()
        self.held.clear()
        self._heap, self._theap = [], {}
        self.changes += 1

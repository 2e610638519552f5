"""Conversation turns inferred where requests carry no workflow identity, and the hazard of a follow-up.

A trace or client without workflow identity (Mooncake's traces: every request is a "workflow" of
one call) hides its conversations, but its prompts show them: a conversation's next turn re-sends
the whole previous prompt and appends to it. Model:
- A request's predecessor is the earlier request of the same tenant whose last block is the
  deepest block of the new prompt (its whole prompt is a prefix of the new one). Its turn is the
  predecessor's plus one (1 without one), in classes 1, 2, 3+.
- A request is *followed up* when a later request names it as predecessor; the age of that
  follow-up is the time between the two arrivals. Per tenant and turn class, the hazard of a
  follow-up is learned online in geometric age bins (1/8 s to 9 h, doubling): follow-ups in a
  bin over the seconds requests spent in it not yet followed up (a request leaves its bin's
  exposure when it is followed up, ages past the last bin, or is dropped from the bounded table;
  the requests inside a bin now count half the bin's width). A class with few observations
  leans on the tenant's pooled hazard (one pseudo-follow-up's worth of exposure).
- A block's density is the expected follow-ups per second of residency from its age on, within
  the horizon (as LHD, Beckmann et al., NSDI 2018): with S the survival under the learned
  hazard, (1 - S(end)) / integral of S. Its class is the turn of the latest request that read it.
Turn classes are where conversations differ: on Mooncake's traces a later turn is followed up
far more often than a first (`python -m benchmarks.turns` prints the shares). Nothing reads a
clock: times are passed in. Tables are bounded: MAX_OPEN open requests (the oldest censored
first), MAX_BLOCKS blocks shared max-min by tenant (`runtime/tenant_lru.py`), MAX_TENANTS.
"""

from __future__ import annotations

import heapq
import math
from collections import deque

import numpy as np

from agentrt.runtime.tenant_lru import TenantLRU

CLASSES = 3                       # turn 1, 2, 3 or more
EDGES = np.array([0.0] + [2.0 ** k for k in range(-3, 16)])   # age bins (s): 0, 1/8, ..., 32768
WIDTH = np.diff(EDGES)
MAX_OPEN = 65_536                 # requests waiting for a follow-up, per instance
MAX_BLOCKS = 1 << 17              # (tenant, block) -> latest request reading it, per instance
MAX_TENANTS = 4096


def _bin(age: float) -> int:
    """Index of the age bin holding `age` (the last bin for any age past it)."""
    return min(int(np.searchsorted(EDGES, age, side="right")) - 1, len(WIDTH) - 1)


class _Tenant:
    __slots__ = ("events", "exposure", "inside", "requests", "table", "dirty")

    def __init__(self) -> None:
        self.events = np.zeros((CLASSES, len(WIDTH)))
        self.exposure = np.zeros((CLASSES, len(WIDTH)))
        self.inside = np.zeros((CLASSES, len(WIDTH)))       # open requests now in each bin
        self.requests = np.zeros(CLASSES)                    # requests seen per turn class
        self.table: np.ndarray | None = None
        self.dirty = True


# a request's record: [turn, arrival time, age bin, open (not yet followed up or censored), blocks,
# conversation (its first turn's number)]
TURN, T0, BIN, OPEN, BLOCKS, CONV = range(6)
# a block's entry: [latest request reading it, its position there, conversation (SHARED once two
# conversations read it)]
B_REC, B_POS, B_CONV = range(3)
SHARED = -1


class TurnHazard:
    """Per tenant: inferred turns, the learned follow-up hazard, and block densities."""

    def __init__(self) -> None:
        self._tenants: dict[str, _Tenant] = {}
        self._crossings: list = []                  # (time, seq, tenant, record): next bin edge
        self._seq = 0
        self._open: deque = deque()                 # (tenant, record), arrival order
        self._n_open = 0
        # (tenant, block hash) -> (latest request that read it, the block's position in it);
        # max-min by tenant, so one tenant's prompts never drop another's
        self._blocks = TenantLRU(MAX_BLOCKS)

    # ------------------------------------------------------------------ observe
    def arrived(self, tenant: str, hash_ids: list[int], now: float) -> None:
        """A request arrived: find its predecessor, record the follow-up, open its own record."""
        self.advance(now)
        if not hash_ids:
            return
        t = self._tenants.get(tenant)
        if t is None:
            if len(self._tenants) >= MAX_TENANTS:
                self._tenants.pop(next(iter(self._tenants)))
            t = self._tenants[tenant] = _Tenant()
        turn = 1
        pred = self._predecessor(tenant, hash_ids)
        if pred is not None:
            turn = pred[TURN] + 1
            if pred[OPEN]:
                self._close(t, pred, now, followed=True)
        cls = min(turn, CLASSES) - 1
        self._seq += 1
        conv = pred[CONV] if pred is not None else self._seq
        rec = [turn, now, 0, True, len(hash_ids), conv]
        blocks = self._blocks
        for pos, h in enumerate(hash_ids):
            key = (tenant, h)
            b = blocks.get(key)
            if b is None:
                blocks.set(key, [rec, pos, conv])
                continue
            if b[B_CONV] != conv:
                b[B_CONV] = SHARED
            b[B_REC], b[B_POS] = rec, pos
            blocks.touch(key)
        t.inside[cls, 0] += 1
        t.requests[cls] += 1
        t.dirty = True
        self._open.append((t, rec))
        self._n_open += 1
        if len(self._open) > 2 * MAX_OPEN:     # closed records behind an open one: compact
            self._open = deque(e for e in self._open if e[1][OPEN])
        self._seq += 1
        heapq.heappush(self._crossings, (now + EDGES[1], self._seq, t, rec))
        while self._n_open > MAX_OPEN:
            self._drop_oldest()
        if len(self._crossings) > 2 * MAX_OPEN:   # closed requests wait for their next edge: drop them
            self._crossings = [e for e in self._crossings if e[3][OPEN]]
            heapq.heapify(self._crossings)

    def _predecessor(self, tenant: str, hash_ids: list[int]) -> list | None:
        """The latest earlier request whose prompt, but for its last block (usually partial, so
        its hash changes once the next turn fills it), is a prefix of this one."""
        blocks = self._blocks
        k = 0
        while k < len(hash_ids) and (tenant, hash_ids[k]) in blocks:
            k += 1
        if k == 0:
            return None
        b = blocks[(tenant, hash_ids[k - 1])]
        rec, pos = b[B_REC], b[B_POS]
        return rec if pos == k - 1 and k >= rec[BLOCKS] - 1 and rec[BLOCKS] >= 2 else None

    def advance(self, now: float) -> None:
        """Move open requests across the bin edges they passed by `now`."""
        heap = self._crossings
        while heap and heap[0][0] <= now:
            _, _, t, rec = heapq.heappop(heap)
            if not rec[OPEN]:
                continue
            cls, b = min(rec[TURN], CLASSES) - 1, rec[BIN]
            t.exposure[cls, b] += WIDTH[b]
            t.inside[cls, b] -= 1
            t.dirty = True
            if b + 1 >= len(WIDTH):
                rec[OPEN] = False                # past the horizon: never followed up
                self._n_open -= 1
                continue
            rec[BIN] = b + 1
            t.inside[cls, b + 1] += 1
            self._seq += 1
            heapq.heappush(heap, (rec[T0] + EDGES[b + 2], self._seq, t, rec))

    def _close(self, t: _Tenant, rec: list, now: float, followed: bool) -> None:
        cls, b = min(rec[TURN], CLASSES) - 1, rec[BIN]
        t.exposure[cls, b] += max(now - rec[T0] - EDGES[b], 0.0)
        t.inside[cls, b] -= 1
        if followed:
            t.events[cls, b] += 1
        rec[OPEN] = False
        t.dirty = True
        self._n_open -= 1

    def _drop_oldest(self) -> None:
        """Censor the oldest open request (the table is full): it counts as not followed up by
        the start of its current bin."""
        while self._open:
            t, rec = self._open.popleft()
            if rec[OPEN]:
                self._close(t, rec, rec[T0] + EDGES[rec[BIN]], followed=False)
                return

    # ------------------------------------------------------------------ score
    def density(self, tenant: str, hash_id: int, now: float) -> float | None:
        """Expected follow-ups per second of residency of a prompt block at `now`, from the turn
        and arrival of the latest request that read it; None where nothing is known (a tenant
        not seen or with no follow-up yet, or a block no prompt named: an output block, which
        no later prompt re-sends under the same hash)."""
        t = self._tenants.get(tenant)
        b = self._blocks.get((tenant, hash_id))
        if t is None or b is None or not t.events.any():
            return None          # nothing known, or no request followed up yet: recency decides
        if t.dirty or t.table is None:
            t.table = _densities(t)
            t.dirty = False
        rec = b[B_REC]
        # a block several conversations read (a system prompt, shared tools) is taken to be read
        # again as a conversation that has gone on is: the turn-3+ class, at its own age
        cls = CLASSES - 1 if b[B_CONV] == SHARED else min(rec[TURN], CLASSES) - 1
        return float(t.table[cls, _bin(max(now - rec[T0], 0.0))])

    def followed_share(self, tenant: str) -> list[float]:
        """Per turn class: the share of the tenant's requests followed up so far."""
        t = self._tenants.get(tenant)
        if t is None:
            return [0.0] * CLASSES
        return [float(e / r) if r else 0.0 for e, r in zip(t.events.sum(axis=1), t.requests)]

    def state_bytes(self) -> int:
        return 150 * len(self._blocks) + 250 * self._n_open + 1500 * len(self._tenants)


def _densities(t: _Tenant) -> np.ndarray:
    """density[class, bin]: follow-ups per second of residency from the start of the bin on."""
    exposure = t.exposure + 0.5 * t.inside * WIDTH
    overall = (t.events.sum() + 1.0) / (exposure.sum() + 1e-9)
    seen = exposure.sum(axis=0)
    pooled = np.empty(len(WIDTH))
    last = overall
    for b in range(len(WIDTH)):
        # an age no request has reached yet carries the hazard of the last age one did
        if seen[b] > 0:
            last = (t.events[:, b].sum() + overall * WIDTH[b]) / (seen[b] + WIDTH[b])
        pooled[b] = last
    prior_x = 1.0 / np.maximum(pooled, 1e-9)      # one pseudo-follow-up at the pooled rate
    hazard = (t.events + pooled * prior_x) / (exposure + prior_x)
    out = np.zeros_like(hazard)
    for c in range(CLASSES):
        hits = 0.0
        life = 0.0
        # walk the bins backwards: from bin b on, hits = 1 - S(end), life = integral of S
        for b in range(len(WIDTH) - 1, -1, -1):
            h, w = hazard[c, b], WIDTH[b]
            stay = math.exp(-h * w)
            inside = (1.0 - stay) / h if h > 0 else w
            hits = (1.0 - stay) + stay * hits
            life = inside + stay * life
            out[c, b] = hits / max(life, 1e-9)
    return out

"""A bounded map shared by tenants, where no tenant's growth evicts another that holds its share.

Model: entries are keyed by (tenant, key). While there are at most `max_entries`, nothing is
dropped. Past it, the tenant holding the most entries gives up its least recently used one (ties:
the tenant that reached that count first). So a tenant holding no more than `max_entries / T` of
the T tenants' entries never loses one to another tenant's growth, however fast that tenant
invents keys (agent ids, prompts): a per-tenant least-recently-used order inside a max-min split
of the capacity. One shared LRU would hand the whole map to whoever inserts fastest.

The map reads like a dict of (tenant, key) -> value (`get`, `in`, `[]`, `values`, `items`, `len`);
`touch` marks an entry used; `set` inserts or replaces and may drop entries of the largest tenant
(`on_drop(tenant, key, value)` is told of each). Every operation is O(1) amortized: per-tenant
ordered dicts, and tenants bucketed by their entry count for the largest.
Nothing reads a clock.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from typing import Any

Key = tuple[str, Hashable]


class TenantLRU:
    __slots__ = ("max_entries", "on_drop", "dropped", "_all", "_order", "_buckets", "_top")

    def __init__(self, max_entries: int, on_drop: Callable[[str, Hashable, Any], None] | None = None) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        self.max_entries = max_entries
        self.on_drop = on_drop
        self.dropped = 0
        self._all: dict[Key, Any] = {}
        self._order: dict[str, OrderedDict[Hashable, None]] = {}     # tenant -> its keys, LRU first
        self._buckets: dict[int, dict[str, None]] = {}               # entry count -> tenants
        self._top = 0                                                # the largest count

    # ---------------------------------------------------------------- dict-like reads
    def get(self, key: Key, default=None):
        return self._all.get(key, default)

    def __getitem__(self, key: Key):
        return self._all[key]

    def __contains__(self, key: Key) -> bool:
        return key in self._all

    def __len__(self) -> int:
        return len(self._all)

    def __iter__(self) -> Iterator[Key]:
        return iter(self._all)

    def values(self):
        return self._all.values()

    def items(self):
        return self._all.items()

    def oldest(self, tenant: str) -> Key | None:
        """The tenant's least recently used key, or None when it holds none."""
        o = self._order.get(tenant)
        return (tenant, next(iter(o))) if o else None

    def tenant_size(self, tenant: str) -> int:
        o = self._order.get(tenant)
        return len(o) if o is not None else 0

    # ---------------------------------------------------------------- writes
    def touch(self, key: Key) -> None:
        """Mark an entry used (most recent of its tenant)."""
        o = self._order.get(key[0])
        if o is not None and key[1] in o:
            o.move_to_end(key[1])

    def set(self, key: Key, value) -> None:
        """Insert or replace one entry (most recent of its tenant)."""
        self.set_many(key[0], (key[1],), value)

    __setitem__ = set

    def set_many(self, tenant: str, keys, value) -> None:
        """`set((tenant, k), value)` for every k, in order, dropping entries only after all are in
        (the hot path of a prompt's blocks: one count update for the batch)."""
        all_ = self._all
        o = self._order.get(tenant)
        if o is None:
            o = self._order[tenant] = OrderedDict()
        before = len(o)
        move = o.move_to_end
        for k in keys:
            key = (tenant, k)
            if key in all_:
                move(k)
            else:
                o[k] = None
            all_[key] = value
        if len(o) != before:
            self._move(tenant, before, len(o))
        elif not o:
            del self._order[tenant]
        while len(all_) > self.max_entries:
            self._drop_run(len(all_) - self.max_entries)

    def _drop_run(self, over: int) -> None:
        """Drop up to `over` entries at once from a tenant that stays the largest while they go
        (as many single drops would), else one."""
        top, b = self._top, self._buckets
        if len(b[top]) > 1 or over == 1 or self.on_drop is not None:
            self._drop_from_largest()
            return
        # the next count held by another tenant, looked for no further down than the run can go
        # (one tenant alone, or far ahead, would otherwise make this a walk over every count)
        second, floor = top - 1, max(0, top - over)
        while second > floor and second not in b:
            second -= 1
        n = min(over, top - second)          # down to a tie at most: the tie rule then decides
        tenant = next(iter(b[top]))
        o, all_ = self._order[tenant], self._all
        for _ in range(n):
            k, _v = o.popitem(last=False)
            del all_[(tenant, k)]
        self.dropped += n
        self._move(tenant, top, top - n)
        if not o:
            del self._order[tenant]

    def pop(self, key: Key, default=None):
        if key not in self._all:
            return default
        value = self._all.pop(key)
        tenant, k = key
        o = self._order[tenant]
        del o[k]
        self._move(tenant, len(o) + 1, len(o))
        if not o:
            del self._order[tenant]
        return value

    def clear(self) -> None:
        self._all.clear()
        self._order.clear()
        self._buckets.clear()
        self._top = 0

    # ---------------------------------------------------------------- internals
    def _move(self, tenant: str, old: int, new: int) -> None:
        b = self._buckets
        if old:
            s = b[old]
            del s[tenant]
            if not s:
                del b[old]
        if new:
            b.setdefault(new, {})[tenant] = None
            if new > self._top:
                self._top = new
        while self._top and self._top not in b:
            self._top -= 1

    def _drop_from_largest(self) -> None:
        top = self._top
        tenant = next(iter(self._buckets[top]))
        o = self._order[tenant]
        k, _ = o.popitem(last=False)
        value = self._all.pop((tenant, k))
        self._move(tenant, top, top - 1)
        if not o:
            del self._order[tenant]
        self.dropped += 1
        if self.on_drop is not None:
            self.on_drop(tenant, k, value)

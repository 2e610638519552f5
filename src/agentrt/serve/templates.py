"""Warm-up templates per (tenant, agent), bounded by bytes as well as by count.

Model: a template (`blocks.PromptTemplate`: the fields and leading segments of an agent's latest
prompt, what a warm-up sends) is measured once, when stored, as the bytes of its JSON. Bounds:
- at most `max_templates` in all, max-min by tenant (`runtime/tenant_lru.py`);
- at most `bytes_per_tenant` bytes of one tenant: past it that tenant's least recently used
  templates go, so a tenant sending megabytes of `tools` per invented agent holds a few, not
  thousands; a single template larger than that is not kept (its agent gets no warm-ups);
- at most `bytes_total` in all: past it the tenant holding the most bytes gives up its least
  recently used, so no tenant within its share of the bytes loses one to another's growth.
Memory for templates is therefore at most `bytes_total` plus a small overhead per entry.
"""

from __future__ import annotations

import orjson

from agentrt.runtime.tenant_lru import TenantLRU
from agentrt.serve.blocks import PromptTemplate

Key = tuple[str, str]


def template_bytes(t: PromptTemplate) -> int:
    return len(orjson.dumps([t.path, t.fields, t.segments])) + 16 * len(t.blocks.hash_ids)


class TemplateStore:
    __slots__ = ("bytes_per_tenant", "bytes_total", "total", "refused", "_lru", "_bytes")

    def __init__(self, max_templates: int = 4096, bytes_per_tenant: int = 8 << 20,
                 bytes_total: int = 64 << 20) -> None:
        if bytes_per_tenant < 1 or bytes_total < 1:
            raise ValueError(f"template byte bounds must be >= 1, got {bytes_per_tenant}, {bytes_total}")
        self.bytes_per_tenant = bytes_per_tenant
        self.bytes_total = bytes_total
        self.total = 0                           # bytes held
        self.refused = 0                         # templates too large to keep
        self._lru = TenantLRU(max_templates, on_drop=self._dropped)     # key -> (template, bytes)
        self._bytes: dict[str, int] = {}         # tenant -> bytes held

    def get(self, key: Key) -> PromptTemplate | None:
        v = self._lru.get(key)
        return v[0] if v is not None else None

    def __contains__(self, key: Key) -> bool:
        return key in self._lru

    def __len__(self) -> int:
        return len(self._lru)

    def tenant_bytes(self, tenant: str) -> int:
        return self._bytes.get(tenant, 0)

    def touch(self, key: Key) -> None:
        self._lru.touch(key)

    def set(self, key: Key, t: PromptTemplate) -> None:
        self.pop(key)
        size = template_bytes(t)
        if size > self.bytes_per_tenant or size > self.bytes_total:
            self.refused += 1
            return
        tenant = key[0]
        self._add(tenant, size)                  # first: the count bound may drop it at once
        self._lru.set(key, (t, size))
        if key not in self._lru:
            return
        while self._bytes[tenant] > self.bytes_per_tenant:
            self.pop(self._lru.oldest(tenant))
        while self.total > self.bytes_total:
            largest = max(self._bytes, key=self._bytes.__getitem__)
            self.pop(self._lru.oldest(largest))

    def pop(self, key: Key) -> None:
        v = self._lru.pop(key)
        if v is not None:
            self._add(key[0], -v[1])

    def _dropped(self, tenant: str, _agent: str, value) -> None:
        self._add(tenant, -value[1])             # dropped by the count bound

    def _add(self, tenant: str, n: int) -> None:
        self.total += n
        left = self._bytes.get(tenant, 0) + n
        if left:
            self._bytes[tenant] = left
        else:
            self._bytes.pop(tenant, None)

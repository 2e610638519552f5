"""Peer KV transfer: a replica receives a prompt's cached blocks from another replica's GPU instead
of computing them (what vLLM's NIXL / Mooncake / LMCache peer-to-peer connectors do).

Model
- At admission on replica r, after r's own hits (GPU, then host tier), the cluster looks up the
  rest of the prompt's hash chain on every other replica's GPU tree (the same tenant's tree: a
  tenant never reads another's blocks) and takes the longest resident run after r's hits. Those
  blocks are reserved on r like blocks to compute, copied over r's network link at `gbps`
  (gigabytes per second of KV received; one transfer at a time per replica, queued behind the
  previous one), and enter r's tree when its prefill completes. The request is LOADING until
  they are in, as with host-tier loads.
- The source keeps its copy and is not touched (a read does not refresh its recency); the copy is
  assumed to stay pinned for the transfer's duration (as a NIXL read holds it). Host tiers are not
  read by peers.
- Metrics: `remote_hit_tokens` (prompt tokens fetched, first admissions) and `net_bytes` (all
  bytes received, re-admissions after a preemption too), per receiving replica.
- A router is told the link's speed in tokens per second (`ClusterHints.transfer_tokens_per_s`),
  so a cost model can price a prefix cached elsewhere at its transfer time.
Default `gbps` (none): no transfer, the cluster of independent caches the routers were built on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agentrt.cache.block import gpu_run

if TYPE_CHECKING:
    from agentrt.cache.radix import RadixKVCache

PeerLookup = Callable[[str, list[int], int, int], int]


@dataclass(slots=True, frozen=True)
class PeerTransfer:
    """The cluster's replica-to-replica KV link: `gbps` gigabytes per second received per replica."""

    gbps: float

    def __post_init__(self) -> None:
        if not self.gbps > 0:
            raise ValueError(f"transfer gbps must be > 0, got {self.gbps}")

    @property
    def bytes_s(self) -> float:
        return self.gbps * 1e9

    def tokens_per_s(self, kv_bytes_per_token: int) -> float:
        return self.bytes_s / kv_bytes_per_token


def resident_depth(cache: "RadixKVCache", tenant: str, hash_ids: Sequence[int], n_full: int) -> int:
    """Length of the longest prefix of `hash_ids[:n_full]` on `cache`'s GPU tier."""
    root = cache.roots.get(tenant)
    return 0 if root is None else gpu_run(root, hash_ids, 0, n_full)[1]


def peer_lookup(caches: Sequence["RadixKVCache"], me: int) -> PeerLookup:
    """The lookup replica `me` runs at admission: blocks after `start` held by its best peer."""
    peers = [c for i, c in enumerate(caches) if i != me]

    def lookup(tenant: str, hash_ids: list[int], start: int, n_full: int) -> int:
        best = start
        for c in peers:
            d = resident_depth(c, tenant, hash_ids, n_full)
            if d > best:
                best = d
        return best - start

    return lookup

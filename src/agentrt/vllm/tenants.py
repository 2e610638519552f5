"""Per-tenant KV shares inside vLLM: what each tenant holds of the pool, for `TenantShares`.

Model (the simulator's, `sched/kvshare.py`, which this feeds): a tenant holds its cached blocks
plus the blocks its running requests hold outside the cache. In vLLM that is
- cached: the physical blocks the mirror maps, counted under the tenant whose request stored
  each hash first (`Mirror.tenant_blocks`; with `cache_salt` per tenant no hash is shared);
- running: per request allocated and not finished, `ceil(num_tokens / block_size)` (prompt and
  output so far, what vLLM has allocated or is about to) minus the blocks of its local prefix hit
  (already counted as cached). A request still waiting holds nothing. Blocks a running request
  computed are cached by vLLM as they fill but enter the mirror only when it finishes, so until
  then they count as running. When another request that hit those blocks finishes (or is
  preempted) first, its path maps them into the mirror while the request that computed them
  still runs (agents sharing a system prompt do this all the time): so a running request's count
  also leaves out the leading blocks of its chain the mirror now maps (`_mirrored`), or they
  would count twice. That prefix only grows while the request runs (its blocks cannot be
  evicted), so it is walked on from where the last step left it: O(blocks newly mapped), not
  O(prompt), per request and step. Not exact where one hash has two physical copies (two
  requests prefilled it at once): the request's own copy is then left out as well.
The running counts are recomputed once per scheduler step (`recount`, O(requests in flight)) and
`TenantShares` re-checks membership after each recount (O(tenants holding blocks); not on every
runtime event, as the simulator does: a step's events would each pay it), and bumps its epoch only
when a tenant crosses its share, so the free queue is re-ranked rarely. Between steps (the next
step's lookups) the free queue is ranked by the membership of the last step's end.
A request counts only while vLLM's status says it runs: a preempted one (vLLM freed its blocks
and put it back in the waiting queue) holds nothing until it runs again.
`gpu_capacity` is the pool's size. With shares off the ledger tracks nothing (`shares` None), so
the hosted runtime calls it unconditionally. Nothing here reads a clock.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from agentrt.runtime.policy import Policy
from agentrt.sched.kvshare import TenantShares
from agentrt.vllm.mirror import hash_int


class TenantLedger:
    """The cache-side counts `TenantShares` reads: `tenant_blocks`, `tenant_reserved`, `gpu_capacity`."""

    __slots__ = ("tenant_blocks", "tenant_reserved", "gpu_capacity", "block_size", "_reqs", "shares",
                 "mirror", "_prefix")

    def __init__(self, tenant_blocks: dict[str, int], block_size: int, mirror=None) -> None:
        self.tenant_blocks = tenant_blocks            # the mirror's own dict, kept current by it
        self.tenant_reserved: dict[str, int] = {}
        self.gpu_capacity = 0
        self.block_size = block_size
        self._reqs: dict[str, tuple[object, str]] = {}   # request id -> (vLLM request, tenant)
        self.shares: TenantShares | None = None
        self.mirror = mirror                          # None: no mirrored prefixes are left out
        self._prefix: dict[str, tuple[int, object]] = {}   # request id -> (depth, node) walked to

    def track(self, request, tenant: str) -> None:
        if self.shares is not None:
            self._reqs[request.request_id] = (request, tenant)

    def untrack(self, request_id: str) -> None:
        self._reqs.pop(request_id, None)
        self._prefix.pop(request_id, None)

    def clear(self) -> None:
        """The runtime failed: let go of every request and stop tracking."""
        self._reqs.clear()
        self._prefix.clear()
        self.tenant_reserved = {}
        self.shares = None

    def __len__(self) -> int:
        return len(self._reqs)

    def recount(self, waiting: Collection[str], hit_blocks) -> None:
        """Running blocks per tenant, from the requests in flight. `waiting`: ids not yet
        allocated; `hit_blocks(request_id)`: blocks of its local prefix hit (0 if unknown)."""
        bs = self.block_size
        out: dict[str, int] = {}
        for rid, (req, tenant) in self._reqs.items():
            if rid in waiting or not _holds_blocks(req):
                continue
            shared = max(hit_blocks(rid), self._mirrored(rid, req))
            n = -(-int(getattr(req, "num_tokens", 0) or 0) // bs) - shared
            if n > 0:
                out[tenant] = out.get(tenant, 0) + n
        self.tenant_reserved = out

    def _mirrored(self, rid: str, req) -> int:
        """Leading blocks of the request's chain the mirror maps now (counted there as cached)."""
        mirror = self.mirror
        if mirror is None:
            return 0
        hashes = getattr(req, "block_hashes", None) or ()
        depth, node = self._prefix.get(rid, (0, mirror.root))
        if depth and getattr(node, "copies", 0) <= 0:   # its copy left (a duplicate's): walk again
            depth, node = 0, mirror.root
        while depth < len(hashes):
            nxt = node.children.get(hash_int(hashes[depth]))
            if nxt is None or nxt.copies <= 0:
                break
            node, depth = nxt, depth + 1
        self._prefix[rid] = (depth, node)
        return depth

    def refresh(self, waiting: Collection[str], hit_blocks: Callable[[str], int]) -> None:
        """Once per scheduler step: recount, then let the shares re-check who is over."""
        if self.shares is not None:
            self.recount(waiting, hit_blocks)
            self.shares.recheck()


def _holds_blocks(request) -> bool:
    """Whether vLLM's request holds KV blocks: while it runs, not waiting, preempted or finished
    (a request without a vLLM status counts)."""
    name = getattr(getattr(request, "status", None), "name", None)
    return name is None or name == "RUNNING"


def with_tenant_shares(policy: Policy, weights: dict[str, float] | None, mirror,
                       block_size: int) -> tuple[Policy, TenantLedger]:
    """`policy` wrapped in `TenantShares` over a ledger of `mirror`'s counts. `weights` None:
    shares off, the policy as it is and a ledger that tracks nothing."""
    ledger = TenantLedger(mirror.tenant_blocks, block_size, mirror)
    if weights is None:
        return policy, ledger
    # membership is re-checked once per scheduler step (`refresh`), not on every runtime event
    shares = ledger.shares = TenantShares(policy, weights, recheck_on_events=False)
    shares.attach(ledger)
    return shares, ledger

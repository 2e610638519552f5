"""The router interface: which replica gets a call, engine-independent.

Model
- A router sees a call as a `RouteRequest` (identity and prompt shape, nothing engine-specific)
  and each replica through a `ReplicaView`: the longest cached prefix of a hash chain, load
  (running and waiting requests, prefill tokens still to compute) and KV capacity (free and total
  blocks, blocks evicted so far). The simulator implements the view over its own cache
  (`cluster/replica.py`); a real deployment implements it over a model of each vLLM replica fed
  by KV events (BlockStored / BlockRemoved) and its queue metrics, so one router runs in both.
- `route(request, replicas, now)` returns an index into `replicas`. It decides only: the caller
  sends the call and then reports what happened through the hooks, in time order:
  `on_routed` (the call was sent to that replica), `on_finished` (the call finished there),
  `on_workflow_end` (the workflow is over: the router drops what it keeps on it).
  `rank` returns every index, best first, for callers that fall back when the first choice is
  unavailable (Ray Serve's `choose_replicas` tiers).
- Time is passed in (`now`, seconds, non-decreasing), never read inside a router.
- State is bounded: a router keeps per-workflow state only for live workflows and drops it at
  `on_workflow_end`, or when a workflow stays silent longer than its `silent_after_s`, or when
  more than `max_workflows` are tracked (least recently active first).
- `bind(hints)` is called once before the first route with what the deployment knows about its
  replicas (`ClusterHints`: block size, prefill speed); routers with a cost model read it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(slots=True, eq=False)
class RouteRequest:
    """One LLM call as a router sees it. `hash_ids` is the prompt's chained block hashes (the
    first `prompt_tokens // block_size` are full blocks); `call_index` counts the workflow's calls."""

    tenant: str
    workflow: str
    agent: str | None
    hash_ids: Sequence[int]
    prompt_tokens: int
    output_tokens: int = 0          # expected output tokens, 0 when unknown
    call_index: int = 0
    thread: str | None = None
    last: bool | None = None        # the workflow's last call, when the caller knows it

    def __post_init__(self) -> None:
        if self.prompt_tokens < 0:
            raise ValueError(f"prompt_tokens must be >= 0, got {self.prompt_tokens}")
        if self.output_tokens < 0:
            raise ValueError(f"output_tokens must be >= 0, got {self.output_tokens}")


@runtime_checkable
class ReplicaView(Protocol):
    """Read-only view of one replica. Counts may be estimates (a KV-event mirror lags a little)."""

    def cached_blocks(self, tenant: str, hash_ids: Sequence[int]) -> int:
        """Length in blocks of the longest prefix of `hash_ids` resident in GPU memory."""
        ...

    @property
    def running(self) -> int:
        """Requests being prefilled or decoded."""
        ...

    @property
    def waiting(self) -> int:
        """Requests queued, not yet admitted."""
        ...

    @property
    def queued_tokens(self) -> int:
        """Prefill tokens not yet computed, over waiting and running requests."""
        ...

    @property
    def free_blocks(self) -> int:
        """GPU blocks neither cached nor held by running requests: exact in the simulator; from a
        KV-event mirror, capacity minus the blocks seen stored and not removed minus those it
        expects routed calls to store (an estimate). No built-in router reads it."""
        ...

    @property
    def capacity_blocks(self) -> int:
        ...

    @property
    def evicted_blocks(self) -> int:
        """GPU blocks evicted since the replica started (monotone; 0 if unknown)."""
        ...


@dataclass(slots=True)
class ClusterHints:
    """What a deployment tells its router about the replicas (all of the same kind)."""

    block_size: int
    prefill_tokens_per_s: float = 20_000.0   # one replica's prefill speed, for cost models
    decode_s_per_token: float = 0.02          # one decode step's time, for cost models
    transfer_tokens_per_s: float = 0.0        # peer KV transfer speed (0: replicas cannot copy KV)

    def __post_init__(self) -> None:
        if self.block_size <= 0:
            raise ValueError(f"block_size must be > 0, got {self.block_size}")
        if self.prefill_tokens_per_s <= 0:
            raise ValueError(f"prefill_tokens_per_s must be > 0, got {self.prefill_tokens_per_s}")
        if not self.transfer_tokens_per_s >= 0:          # NaN too
            raise ValueError(f"transfer_tokens_per_s must be >= 0 (0: no copying), got {self.transfer_tokens_per_s}")


def load_of(v: ReplicaView) -> int:
    """A replica's load as the baseline routers count it: requests running plus waiting."""
    return v.running + v.waiting


class Router:
    """Base router. Subclasses implement `route`; hooks default to no-ops."""

    name = "base"
    description = ""

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self.hints: ClusterHints | None = None

    def bind(self, hints: ClusterHints) -> None:
        self.hints = hints

    def route(self, request: RouteRequest, replicas: Sequence[ReplicaView], now: float) -> int:
        raise NotImplementedError

    def rank(self, request: RouteRequest, replicas: Sequence[ReplicaView], now: float) -> list[int]:
        """Every replica index, best first: `route`'s choice, then the rest by load."""
        first = self.route(request, replicas, now)
        rest = sorted((i for i in range(len(replicas)) if i != first),
                      key=lambda i: (load_of(replicas[i]), i))
        return [first, *rest]

    def on_routed(self, request: RouteRequest, replica: int, now: float) -> None:
        """The call was sent to `replica`."""

    def on_finished(self, request: RouteRequest, replica: int, now: float) -> None:
        """The call finished on `replica`."""

    def on_workflow_end(self, workflow: str, tenant: str, now: float) -> None:
        """The workflow is over; forget it."""

    def state_size(self) -> int:
        """Entries the router keeps (workflows, agents, ...): what the bounded-state tests check."""
        return 0

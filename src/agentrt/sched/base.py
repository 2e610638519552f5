"""The scheduler interface: a priority for each waiting call, composed with any eviction policy.

An eviction policy ranks cached blocks; a scheduler ranks waiting calls. Both are written once
against the runtime's events and run in the simulator, under `agentrt serve` and (through vLLM's
priority scheduling) inside vLLM:
- `observe(event)`: the same engine events a policy sees (`runtime/events.py`); time is
  `event.now`, never read.
- `key(call, arrival, view)`: a sort key, lowest admitted first. Contract (as for block scores):
  a call's key may change only on an event or after the scheduler bumps `epoch`, except through
  `view.cached_blocks`, the cache state schedulers such as `lpm` read at each admission.
- `skips_blocked`: when the best call does not fit in GPU memory, the engine may admit later ones
  instead (backfill), but only into free blocks, so admitting a cold call never evicts the cache
  a blocked warm one is waiting for.
- `batch_key(call, arrival, prefill_left)`: with `shapes_batch`, the order in which admitted
  calls get the prefill tokens of an iteration (chunked prefill shares a token budget); without
  it, admission order, as vLLM's running list.
- `defer(call, arrival, view)`: with `defers`, the engine leaves the call waiting for now (it
  blocks nobody) until an event changes the answer or it has been held `max_hold_s`:
  workflow-level admission control. Held calls are mostly new workflows at the door, so their
  bound is separate from (and longer than) the bound on calls of running workflows; `fair` also
  holds a running workflow's call while its tenant is over its share of running memory, which
  its `max_wait_s` does not override (docs/schedulers.md, Starvation bound).
- `max_wait_s` bounds starvation for every scheduler: a call that has waited longer goes before
  every call that has not (in arrival order among such calls), no call is backfilled past it, and
  no running call is preempted in its favour ahead of others. Its wait is then bounded by
  `max_wait_s` plus the time to drain the calls that aged before it. The same goes for the
  prefill order, unless `ages_batch` is False: a scheduler whose `batch_key` is starvation-free
  by itself (`fair`: every tenant gets its weighted share of each iteration's budget) keeps its
  order, since under overload nearly every admitted call has aged in the queue and aging would
  hand the budget back to arrival order.
With nothing overridden, a scheduler is FCFS with head-of-line blocking (what engines do today).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Protocol

if TYPE_CHECKING:
    from agentrt.runtime.events import CallInfo, Event

DEFAULT_MAX_WAIT_S = 60.0     # calls of workflows that have started
DEFAULT_MAX_HOLD_S = 600.0    # a new workflow held at the door (schedulers that `defer`)


class QueueView(Protocol):
    """What an engine shows a scheduler while it ranks its waiting calls."""

    now: float

    def cached_blocks(self, call: "CallInfo") -> int:
        """The call's prompt blocks that are resident on the GPU now (its cached prefix)."""
        ...

    @property
    def capacity_blocks(self) -> int:
        """GPU KV blocks in the pool."""
        ...

    @property
    def reserved_blocks(self) -> int:
        """GPU blocks running requests hold outside the cache tree (partial and output blocks)."""
        ...

    @property
    def requests(self) -> int:
        """Requests in the engine: running and waiting (held ones included)."""
        ...

    def prefill_seconds(self, tokens: int) -> float:
        """The engine's time to prefill `tokens` uncached prompt tokens alone."""
        ...


class Scheduler:
    name: ClassVar[str] = "fcfs"
    description: ClassVar[str] = "first come, first served; the head of the queue blocks the rest (today's engines)"
    reorders: ClassVar[bool] = False      # False: engines keep arrival order and skip the sort
    skips_blocked: ClassVar[bool] = False
    wants_events: ClassVar[bool] = False
    reads_cache: ClassVar[bool] = False   # `key` calls `view.cached_blocks`
    shapes_batch: ClassVar[bool] = False  # orders the prefill chunks of admitted calls too
    ages_batch: ClassVar[bool] = True     # aged calls go first in that order too (see above)
    defers: ClassVar[bool] = False        # may hold calls back (`defer`)

    def __init__(self, max_wait_s: float = DEFAULT_MAX_WAIT_S, seed: int = 0,
                 max_hold_s: float = DEFAULT_MAX_HOLD_S) -> None:
        for name, v in (("max_wait_s", max_wait_s), ("max_hold_s", max_hold_s)):
            if not isinstance(v, (int, float)) or not 0 < v < float("inf"):
                raise ValueError(f"{name} must be a finite number of seconds > 0, got {v!r}")
        self.max_wait_s = float(max_wait_s)
        self.max_hold_s = float(max_hold_s)
        self.seed = seed
        self.epoch = 0

    def observe(self, event: "Event") -> None:
        """Take an engine event (only called when `wants_events`)."""

    def key(self, call: "CallInfo", arrival: float, view: QueueView):
        """Sort key of a waiting call: lowest is admitted first. Default: arrival order."""
        return call.rid

    def defer(self, call: "CallInfo", arrival: float, view: QueueView) -> bool:
        """Hold this call back for now (only with `defers`; never asked once it waited
        `max_hold_s`)."""
        return False

    def held_until(self, call: "CallInfo", arrival: float) -> float:
        """When a call `defer` just held must be asked again even if no event comes."""
        return arrival + self.max_hold_s

    def wakes_on_prefill(self) -> bool:
        """Whether a prompt entering the cache may release a held call (`defer`): the engine then
        runs an admission pass after each prefill, not only after arrivals and finishes."""
        return False

    def engine_caches_at_schedule(self) -> None:
        """The engine (as vLLM V1) shares a prompt's blocks with other requests as soon as they
        are scheduled, not when its prefill completes; called once, before the first call."""

    def batch_key(self, call: "CallInfo", arrival: float, prefill_left: int):
        """Sort key of an admitted call that still prefills (only with `shapes_batch`)."""
        return arrival

    def prefill_cap(self, tenant: str, budget: int) -> int:
        """Prefill tokens the tenant's calls may compute together in the next iteration, given
        the engine's `budget` (its token budget less the decode steps); asked once per tenant
        per iteration, only with `shapes_batch`. Default: all of it."""
        return budget

    # ------------------------------------------------------------------ used by engines
    def aged(self, arrival: float, now: float) -> bool:
        return now - arrival > self.max_wait_s

    def may_hold(self, arrival: float, now: float) -> bool:
        return now - arrival <= self.max_hold_s

    def rank(self, call: "CallInfo", arrival: float, view: QueueView) -> tuple:
        """The full admission key: calls past `max_wait_s` first, in arrival order, then `key`."""
        if view.now - arrival > self.max_wait_s:
            return (0, arrival, call.rid)
        return (1, self.key(call, arrival, view), call.rid)

    def priority(self, call: "CallInfo", arrival: float, view: QueueView) -> int:
        """A static integer priority (lower first) for engines that fix it when a request is
        submitted, as vLLM's priority scheduling does (ties there go in arrival order): the
        leading number of `key`, rounded. Arrival order (FCFS) gives every call 0. Such engines
        re-rank nothing later, so `max_wait_s` cannot be enforced through them."""
        if not self.reorders:
            return 0
        k = self.key(call, arrival, view)
        lead = k[0] if isinstance(k, tuple) else k
        return int(max(-(2 ** 62), min(2 ** 62, round(lead))))

    def batch_rank(self, call: "CallInfo", arrival: float, prefill_left: int, now: float) -> tuple:
        """The full prefill-order key: calls past `max_wait_s` first (with `ages_batch`), then
        `batch_key`."""
        if self.ages_batch and now - arrival > self.max_wait_s:
            return (0, arrival, call.rid)
        return (1, self.batch_key(call, arrival, prefill_left), call.rid)

    def state_bytes(self) -> int:
        return 0

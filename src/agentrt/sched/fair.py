"""`fair`: weighted per-tenant shares of prefill and of the KV cache.

Model
- Prefill and decode work are shared by start-time fair queueing over tenants: each tenant has a
  virtual service `work / weight` (work in tokens: prompt plus output, the cached part of the
  prompt refunded at admission). A call's start tag is its tenant's virtual service when it
  arrives, after which the tenant is charged for it, so a burst's calls get increasing tags;
  calls go in start-tag order, ties in arrival order. A tenant that was idle re-enters at the
  system's virtual time (the smallest start tag waiting or running), so idling banks no credit
  and a burst cannot be paid for by a quiet past, while a quiet tenant is not queued behind the
  whole of a burst.
- The KV cache is shared by weight too, max-min (`kvshare.py`): engines wrap the eviction
  policy so that while a tenant holds more blocks than its share, its blocks are evicted before
  any other tenant's. A burst therefore evicts its own cache first, never a quiet tenant's agents.
- Weights come from the `weights` option ("tenant:weight,..." or a dict); unnamed tenants weigh 1.
- Running memory is shared by weight as well, max-min (`maxmin.py`): while another tenant is
  active (a workflow that has not ended, even one waiting on a tool, and a call in flight or
  blocks cached), a call is held back if its tenant's running requests plus the call would span
  more than the tenant's max-min share of the GPU pool (a tenant with nothing running is never
  held). Each other active tenant's demand is what it holds and may need: its cached blocks plus
  the most blocks its running calls spanned at one of its admissions since its oldest open
  workflow started (`peaks.py`; so while it waits on a tool its cache stays and its next calls
  fit at once, and a burst whose workflows have all ended stops counting); a tenant demanding
  less than its weighted share leaves the rest to the others. With two tenants that both want
  more than half this is the static split by weight; tenants that hold almost nothing (idle,
  or names invented to dilute the shares) reserve almost nothing. Without this a burst's running requests fill
  the pool and every eviction lands on the quiet tenant's cache, whatever the eviction order.
  Held calls wait at most `max_hold_s`.
- Each iteration's prefill budget is shared by weight too (`prefillshare.py`): admitted calls'
  chunks go in the order of their tenant's virtual prefill time (tokens computed / weight, with
  the same re-entry rule), so a quiet tenant's chunk goes ahead of a burst's instead of waiting
  behind its earlier-admitted calls. That order bounds every call's prefill by itself, so calls
  that aged in the queue do not jump it (`ages_batch` is False): under a burst nearly all of the
  burst's calls have aged, and aging would give the budget back to arrival order.
- While more than one tenant has a workflow open, the least-served of them (the smallest
  virtual service) has precedence in each iteration's prefill: its chunks go first, uncapped, and
  every other tenant's prefill in the iteration is capped at `shared_chunk_tokens` together
  (Sarathi-Serve's bounded chunks, applied per tenant). A quiet tenant's call that arrives
  mid-iteration then waits out at most that many of a burst's prefill tokens instead of a full
  token budget (8,192 tokens: about a second on a 32B model), its prefill runs at the rate it has
  alone, and its decode steps are not stretched by a burst's long chunks. Precedence moves with
  the virtual clocks (charged at each call's arrival), so a tenant that takes more than its share
  loses it: another tenant's prefill waits at most for the calls the least-served tenant sent
  before its clock passed the other's. In the cost model
  (`engine/costs.py`) smaller chunks cost only the per-iteration overhead while they stay
  compute-bound; on real GPUs they also run at a lower MFU. The default, 512 tokens, is the
  token budget Sarathi-Serve (OSDI '24) runs under a strict decode-latency SLO (2,048 under a
  relaxed one); 0 turns the cap and the precedence off (the chunks then go in the fair order
  alone).
- When the best call does not fit, later calls are admitted into free blocks only, and the
  `max_wait_s` bound on admission holds, as for every scheduler (`base.py`).
"""

from __future__ import annotations

from typing import ClassVar

from agentrt.runtime import events as ev
from agentrt.sched.base import DEFAULT_MAX_HOLD_S, DEFAULT_MAX_WAIT_S, Scheduler
from agentrt.sched.maxmin import share_of_unbounded
from agentrt.sched.peaks import RunningPeaks
from agentrt.sched.prefillshare import PrefillShares, passed
from agentrt.sched.service import prefill_work

DEFAULT_SHARED_CHUNK_TOKENS = 512


def parse_weights(weights: str | dict | None) -> dict[str, float]:
    """"a:2,b:1" or {"a": 2} -> {tenant: weight}; every weight must be > 0."""
    if weights is None or weights == "":
        return {}
    if isinstance(weights, str):
        out = {}
        for item in weights.split(","):
            name, sep, w = item.strip().rpartition(":")
            if not sep or not name:
                raise ValueError(f"weights item {item!r}: expected TENANT:WEIGHT")
            out[name] = float(w)
        weights = out
    if not isinstance(weights, dict):
        raise ValueError(f"weights must be 'tenant:weight,...' or a mapping, got {type(weights).__name__}")
    for name, w in weights.items():
        if not isinstance(w, (int, float)) or not w > 0 or w == float("inf"):
            raise ValueError(f"weight of tenant {name!r} must be a finite number > 0, got {w!r}")
    return {str(k): float(v) for k, v in weights.items()}


class FairScheduler(Scheduler):
    name: ClassVar[str] = "fair"
    description: ClassVar[str] = "per-tenant weighted fair shares of prefill (virtual time) and of the KV cache"
    reorders: ClassVar[bool] = True
    skips_blocked: ClassVar[bool] = True
    wants_events: ClassVar[bool] = True
    kv_shares: ClassVar[bool] = True
    shapes_batch: ClassVar[bool] = True
    ages_batch: ClassVar[bool] = False
    defers: ClassVar[bool] = True

    def __init__(self, max_wait_s: float = DEFAULT_MAX_WAIT_S, seed: int = 0,
                 max_hold_s: float = DEFAULT_MAX_HOLD_S,
                 weights: str | dict | None = None, shared_chunk_tokens: int = DEFAULT_SHARED_CHUNK_TOKENS) -> None:
        super().__init__(max_wait_s, seed, max_hold_s)
        if isinstance(shared_chunk_tokens, bool) or not isinstance(shared_chunk_tokens, int) or shared_chunk_tokens < 0:
            raise ValueError(f"shared_chunk_tokens must be an integer >= 0 (0: no cap), got {shared_chunk_tokens!r}")
        self.shared_chunk_tokens = shared_chunk_tokens
        self._least: str | None = None          # the least-served tenant with open workflows (cached)
        self.weights = parse_weights(weights)
        self.virtual: dict[str, float] = {}
        self.backlog: dict[str, int] = {}       # calls arrived and not finished, per tenant
        self.tags: dict[int, float] = {}        # waiting or running call -> its start tag
        # open workflows per tenant, and the most blocks a tenant's running calls spanned at an admission
        self.peak_running = RunningPeaks()
        self.live = self.peak_running.open      # tenant -> its workflows that have not ended
        self._gone: set[str] = set()            # tenants without workflows or calls whose clocks are kept
        self._sweep_at = 64
        self.prefill = PrefillShares(self.weight)

    def weight(self, tenant: str) -> float:
        return self.weights.get(tenant, 1.0)

    def observe(self, e) -> None:
        t = type(e)
        self._least = None
        if t is ev.CallArrived:
            c = e.call
            if c.warmup or c.rid in self.tags:
                return
            self._gone.discard(c.tenant)
            self.peak_running.opened(c.tenant, c.workflow)
            n = self.backlog.get(c.tenant, 0)
            if n == 0:
                # an idle tenant re-enters at the system's virtual time
                self.virtual[c.tenant] = max(self.virtual.get(c.tenant, 0.0), self._system_time())
            self.backlog[c.tenant] = n + 1
            # start tag, then charge the call's whole prompt and output; admission refunds
            # what turns out to be cached
            v = self.virtual.get(c.tenant, 0.0)
            self.tags[c.rid] = v
            self.virtual[c.tenant] = v + (c.input_length + c.output_length) / self.weight(c.tenant)
        elif t is ev.CallAdmitted:
            c = e.call
            resumed = bool(c.extra.get("resumed"))
            work = prefill_work(c, e.gpu_hit, e.host_hit, e.remote_hit)
            self.prefill.admit(c.rid, c.tenant, None if resumed else work)
            if not c.warmup and not resumed and c.rid in self.tags:
                cached = c.input_length - work
                self.virtual[c.tenant] = self.virtual.get(c.tenant, 0.0) - cached / self.weight(c.tenant)
        elif t is ev.PromptCached:
            self.prefill.done(e.call.rid)
        elif t is ev.CallFinished:
            c = e.call
            self.prefill.done(c.rid)
            if c.warmup or self.tags.pop(c.rid, None) is None:
                return
            n = self.backlog.get(c.tenant, 0) - 1
            if n > 0:
                self.backlog[c.tenant] = n
            else:
                self.backlog.pop(c.tenant, None)
                self._left(c.tenant)
        elif t is ev.WorkflowEnded:
            was_live = e.tenant in self.live
            self.peak_running.closed(e.tenant, e.workflow)
            if was_live and e.tenant not in self.live:       # its last open workflow ended
                self._left(e.tenant)

    def _system_time(self) -> float:
        """Where a tenant with nothing in flight re-enters: the smallest start tag still waiting
        or running, else the largest clock."""
        return min(self.tags.values()) if self.tags else max(self.virtual.values(), default=0.0)

    def _left(self, tenant: str) -> None:
        """A tenant with no open workflow and nothing in flight: its clocks are dropped once the
        system's virtual time passes them (re-entry lifts them there anyway), so the state of a
        long-running server stays bounded by the tenants present. One that took more than its
        share keeps its clock until then: ending its workflows does not wipe its debt."""
        if tenant in self.live or self.backlog.get(tenant):
            return
        self._gone.add(tenant)
        if len(self._gone) < self._sweep_at:
            return
        # nothing waits or runs: re-entry is at the largest clock, which stays
        drop = passed(self.virtual, self._gone, self._system_time(), strict=not self.tags)
        drop &= self.prefill.forget(drop)
        for t in drop:
            self.virtual.pop(t, None)
        self._gone -= drop
        self._sweep_at = max(64, 2 * len(self._gone))     # amortized: each sweep is paid for by as many departures

    def defer(self, call, arrival, view) -> bool:
        if call.warmup:
            return False
        mine = view.tenant_running_blocks(call.tenant)
        need = -(-(call.input_length + call.output_length) // call.block_size)
        if mine == 0:
            self._note_peak(call.tenant, need)
            return False
        others = []
        for t in self.live:
            if t == call.tenant:
                continue
            cached = view.tenant_cached_blocks(t)
            if cached or self.backlog.get(t):
                # what the other tenant holds and may need: its cache and its peak running
                others.append((cached + self.peak_running.get(t), self.weight(t)))
        if not others:
            self._note_peak(call.tenant, mine + need)
            return False
        if mine + need > share_of_unbounded(view.capacity_blocks, self.weight(call.tenant), others):
            return True
        self._note_peak(call.tenant, mine + need)
        return False

    def _note_peak(self, tenant: str, blocks: int) -> None:
        self.peak_running.note(tenant, blocks)

    def key(self, call, arrival, view):
        return (self.tags.get(call.rid, 0.0), arrival)

    def batch_key(self, call, arrival, prefill_left):
        # the least-served tenant's chunks first while tenants share (see the module docstring)
        first = 0 if self.shared_chunk_tokens and len(self.live) > 1 and call.tenant == self.least() else 1
        return (first, self.prefill.tag(call.rid, call.tenant, prefill_left), prefill_left, arrival)

    def least(self) -> str:
        """The tenant with open workflows whose virtual service is smallest (ties: by name)."""
        least = self._least
        if least is None:
            v = self.virtual
            least = self._least = min(self.live, key=lambda t: (v.get(t, 0.0), t))
        return least

    def prefill_cap(self, tenant: str, budget: int) -> int:
        cap = self.shared_chunk_tokens
        if not cap or cap >= budget or len(self.live) < 2:
            return budget
        return budget if tenant == self.least() else cap

    def state_bytes(self) -> int:
        return self.prefill.state_bytes() + 150 * (len(self.virtual) + len(self.backlog)) + 80 * len(self.tags) + 100 * sum(len(f) for f in self.live.values()) + 80 * (self.peak_running.noted() + len(self._gone))

"""The LRU safety net: any policy falls back to LRU order while it measurably loses to LRU.

Model
- Beside the real cache, a sampled shadow LRU (`shadow_lru.py`) runs on the same stream of
  calls and learns, for each call, how many of its sampled prompt blocks LRU would have served;
  the real cache says how many the policy served. Per call, d = shadow hits - real hits.
- Evidence: decayed sums of d, d^2 and sampled blocks N. The clock is the real cache's turnover:
  its sampled misses, in shadow sizes, so the memory of the test is `window` turnovers of the
  cache whatever its size and hit rate (a policy's choices show in hits only once the cache has
  turned over). The policy is losing when, after at least one half-life,
      mean(d) - bias > margin + z * se,    se = sqrt(sum (d - mean(d) n)^2) / N
  (calls are the independent units: a call's blocks hit or miss together).
- States. POLICY: the policy's order. FALLBACK: every block's key is its LRU key (the wrapped
  policy's `fallback_key` if it has one, else `block.last_touch`); here the real cache is LRU,
  so mean(d) measures the shadow's own error against the engine's LRU, kept as `bias` (0 until
  measured, and only from the second half-life of a fallback on: before that the cache still
  holds what the policy kept). After `hold` half-lives in FALLBACK (four at first) the net
  PROBEs: the policy's order again, on fresh evidence; after one half-life, a mean loss beyond
  the margin (significant or not: on probation the benefit of the doubt is LRU's) sends it back,
  anything else returns it to POLICY. Every fallback but the first doubles `hold` (up to
  `max_hold`); it halves again (down to four) for every 4 x `hold` half-lives the policy stays
  in POLICY without losing: a policy that loses again and again ends up in LRU order most of the
  time, one that stopped losing earns short holds back. A wrong fallback costs at most what the
  policy would have gained over one hold; a losing policy is in control for about one half-life
  per doubling.
- The net never changes which blocks may be evicted (locks, leaves, tiers are the cache's), only
  their order: it wraps `score`. Each switch bumps `epoch`, so the cache re-ranks once; in
  FALLBACK the wrapped policy's epoch bumps are not passed on (LRU keys do not change without a
  touch) unless it has its own `fallback_key`. A prefetch's eviction bound (`evict_below`) is in
  the policy's key space: in FALLBACK it is dropped (the prefetch uses free blocks only).
Policy-agnostic: it reads events and block recency, never a policy's state. Time is passed in
(`now` of the events); the time spent in FALLBACK is counted from it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from agentrt.runtime import events as ev
from agentrt.runtime.actions import Prefetch
from agentrt.runtime.shadow_lru import ShadowLRU

POLICY, FALLBACK, PROBE = "policy", "fallback", "probe"
MIN_HOLD = 4                  # half-lives of the first (and shortest) fallback


@dataclass(slots=True)
class NetConfig:
    """The safety net's test (see the module docstring); `enabled=False`: no net."""
    enabled: bool = True
    margin: float = 0.005     # hit rate (a fraction) the policy may trail LRU before it counts
    z: float = 2.0            # standard errors of evidence asked for on top of the margin
    window: float = 1.0       # half-life of the evidence, in shadow sizes of sampled misses
    max_hold: int = 32        # longest fallback before a probe, in half-lives
    target: int = 256         # sampled keys the shadow aims to hold (sets the sampling rate)

    def __post_init__(self) -> None:
        if not 0.0 <= self.margin < 1.0:
            raise ValueError(f"safety net margin must be in [0, 1), got {self.margin}")
        if not (self.z >= 0 and math.isfinite(self.z)):
            raise ValueError(f"safety net z must be >= 0, got {self.z}")
        if not (self.window > 0 and math.isfinite(self.window)):
            raise ValueError(f"safety net window must be > 0, got {self.window}")
        if self.max_hold < 1:
            raise ValueError(f"safety net max_hold must be >= 1, got {self.max_hold}")


class _Evidence:
    """Decayed sums over one stretch of calls of n (sampled blocks), d, d^2, d n and n^2: the
    ratio estimate mean = sum d / sum n and its standard error, calls as the units."""
    __slots__ = ("n", "d", "dd", "dn", "nn")

    def __init__(self) -> None:
        self.n = self.d = self.dd = self.dn = self.nn = 0.0

    def add(self, n: int, d: int, keep: float) -> None:
        self.n = self.n * keep + n
        self.d = self.d * keep + d
        self.dd = self.dd * keep + d * d
        self.dn = self.dn * keep + d * n
        self.nn = self.nn * keep + n * n

    def mean(self) -> float:
        return self.d / self.n if self.n else 0.0

    def se(self) -> float:
        """sqrt(sum (d - mean n)^2) / sum n."""
        if not self.n:
            return math.inf
        m = self.d / self.n
        return math.sqrt(max(0.0, self.dd - 2 * m * self.dn + m * m * self.nn)) / self.n


class SafetyNet:
    """Ranks blocks as the wrapped policy does, or by LRU while it loses (see the module docstring)."""

    def __init__(self, policy, config: NetConfig | None = None,
                 cached: Callable[[], int] | None = None) -> None:
        """`cached`: the engine's count of cached blocks now (`AgentRuntime.cached_blocks`);
        while it is None the net sees nothing and ranks as the policy does."""
        self.policy = policy
        self.config = config if config is not None else NetConfig()
        self.shadow = ShadowLRU(cached, self.config.target)
        self.dynamic = True
        self.mode = POLICY
        self._inner = policy.score
        self._fallback_key = getattr(policy, "fallback_key", None)
        self._bumps = 0
        self._frozen = 0                 # the policy's epoch when the fallback began
        self.ev = _Evidence()            # this stretch (reset at every switch)
        self.bias = _Evidence()          # the shadow's error against the engine's LRU (FALLBACK)
        self.hold_halves = MIN_HOLD      # the next fallback lasts this many half-lives
        self._since = 0.0                # sampled misses (turnover) since the last switch
        self._quiet = 0.0                # the same, in control without losing, since the hold last halved
        self._switched_at: float | None = None
        self._last_now = 0.0
        # counters for metrics
        self.fallbacks = 0
        self.probes = 0
        self.fallback_s = 0.0
        self.sampled = self.real_hits = self.shadow_hits = 0
        self.calls = 0

    # ------------------------------------------------------------------ ranking
    @property
    def fallback(self) -> bool:
        return self.mode == FALLBACK

    @property
    def epoch(self) -> int:
        if self.mode == FALLBACK and self._fallback_key is None:
            return self._bumps + self._frozen
        return self._bumps + self.policy.epoch

    def score(self, block):
        if self.mode == FALLBACK:
            fk = self._fallback_key
            return block.last_touch if fk is None else fk(block)
        return self._inner(block)

    def actions(self, acts: list) -> list:
        """The policy's actions; in FALLBACK a prefetch's eviction bound (in the policy's key
        space) is dropped: it may use free blocks only."""
        if self.mode == FALLBACK:
            for a in acts:
                if isinstance(a, Prefetch) and a.evict_below is not None:
                    a.evict_below = None
        return acts

    # ------------------------------------------------------------------ events
    def observe(self, e) -> None:
        if self.shadow.cached is None:
            return
        t = type(e)
        if t is ev.CallAdmitted:
            info = e.call
            if not info.warmup:
                self._admitted(e.now, info, e.gpu_hit)
        elif t is ev.PromptCached:
            if not e.call.warmup:
                self.shadow.prompt_cached(e.call.rid)
        elif t is ev.CallFinished:
            if not e.call.warmup:
                self.shadow.finished(e.call, e.node)
        elif t is ev.BlocksEvicted:
            self.shadow.trim()
        elif t is ev.WorkflowEnded:
            self.shadow.workflow_ended(e.tenant, e.workflow)
        self._last_now = e.now

    def _admitted(self, now: float, info, gpu_hit: int) -> None:
        sh = self.shadow
        n, real, shadow = sh.admitted(info, gpu_hit)
        if not n:
            return
        self.calls += 1
        self.sampled += n
        self.real_hits += real
        self.shadow_hits += shadow
        d = shadow - real
        # the clock is the real cache's turnover: its misses, in shadow sizes
        half = self.config.window * max(16.0, len(sh.touch))
        turned = n - real
        keep = 0.5 ** (turned / half)
        self._since += turned
        if self.mode == FALLBACK:
            if self._since >= half:
                self.bias.add(n, d, keep)
            if self._since >= self.hold_halves * half:
                self._switch(PROBE, now)
            return
        if self.mode == POLICY and self.hold_halves > MIN_HOLD:
            self._quiet += turned
            if self._quiet >= 4 * self.hold_halves * half:
                self.hold_halves //= 2        # a long stretch in control without losing
                self._quiet = 0.0
        ev_ = self.ev
        ev_.add(n, d, keep)
        if self._since < half:           # not yet one half-life of evidence
            return
        bias = self.bias.mean() if self.bias.n >= half else 0.0
        loss = ev_.mean() - bias - self.config.margin
        # in control, the policy keeps it until it loses beyond doubt; on probation it must show
        # no loss at all to get it back
        losing = loss > self.config.z * ev_.se() if self.mode == POLICY else loss > 0
        if losing:
            if self.fallbacks:
                self.hold_halves = min(2 * self.hold_halves, self.config.max_hold)
            self._switch(FALLBACK, now)
        elif self.mode == PROBE:
            self._switch(POLICY, now)

    def _switch(self, mode: str, now: float) -> None:
        if self.mode == FALLBACK and self._switched_at is not None:
            self.fallback_s += max(0.0, now - self._switched_at)
        if mode == FALLBACK:
            self.fallbacks += 1
            self._frozen = self.policy.epoch
        elif mode == PROBE:
            self.probes += 1
        self.mode = mode
        self._switched_at = now
        self._since = self._quiet = 0.0
        self.ev = _Evidence()
        self._bumps += 1

    # ------------------------------------------------------------------ reports
    def stats(self) -> dict[str, int | float]:
        """The net's numbers for engines' metrics (O(1)): its state, how often and how long it fell
        back, and the sampled hit rates it compared."""
        spent = self.fallback_s
        if self.mode == FALLBACK and self._switched_at is not None:
            spent += max(0.0, self._last_now - self._switched_at)
        s = max(1, self.sampled)
        return {"net_fallback": int(self.mode == FALLBACK), "net_fallbacks": self.fallbacks,
                "net_probes": self.probes, "net_fallback_s": spent,
                "net_sampled_blocks": self.sampled, "net_real_hit": self.real_hits / s,
                "net_lru_hit": self.shadow_hits / s, "net_bias": self.bias.mean(),
                "net_sampling_rate": self.shadow.rate}

    def state_bytes(self) -> int:
        return self.shadow.state_bytes() + 200

"""Which next-agent forecast to trust, per agent: the trained predictor's or the online model's.

A trained predictor knows agents by name. Names collide across applications ("coder",
"writer", "assistant"): a predictor trained on one application's logs forecasts another's
agent of the same name from the wrong workflow structure, and PBKV-TA then evicts exactly the
threads that will be called next. The judge scores both forecasts against what happens. For
each (tenant, agent) it keeps the log loss each forecast gave the outcome of the latest
`window` calls made after that agent (the next agent, or END), computed before the online model
learns the outcome (prequential). PBKV-TA forecasts from the online model where the evidence
for it over the window is decisive: the likelihood ratio of the outcomes under the online and
the trained forecast is above 100 (Jeffreys' "decisive" on his scale of evidence; summed log
losses more than ln 100 apart), and from the trained predictor otherwise (also with no outcome
yet). A predictor trained on another application that shares agent names gives its outcomes
near-zero probability, tens of nats per window behind; where both forecast alike (an agent
whose successor is fixed) a rounding difference must not flip the forecast, whose K-step
structure is the trained predictor's strength.
Probabilities are floored at the predictors' own evaluation floor (`predict.samples.PROB_FLOOR`)
before the log; an outcome a forecast gave no weight costs log(1 / floor).
State is bounded: at most `max_keys` (tenant, agent) pairs; past it the tenant holding the most
loses its least recently scored one, so no tenant's agents are dropped by another's.
Nothing reads a clock.
"""

from __future__ import annotations

import math
from collections import deque

from agentrt.predict.samples import PROB_FLOOR
from agentrt.runtime.tenant_lru import TenantLRU

DECISIVE = math.log(100.0)   # nats: a likelihood ratio of 100 (Jeffreys' scale, "decisive")


class _Losses:
    __slots__ = ("pairs", "trained", "online")

    def __init__(self) -> None:
        self.pairs: deque[tuple[float, float]] = deque()
        self.trained = 0.0
        self.online = 0.0


def log_loss(p: float) -> float:
    return -math.log(max(float(p), PROB_FLOOR))


class ForecastJudge:
    def __init__(self, window: int = 32, max_keys: int = 4096) -> None:
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        if max_keys < 1:
            raise ValueError(f"max_keys must be >= 1, got {max_keys}")
        self.window = window
        self.max_keys = max_keys
        # max-min by tenant (runtime/tenant_lru.py): one tenant's invented agents drop its own
        self._keys = TenantLRU(max_keys, on_drop=lambda t, a, _v: self._online.discard((t, a)))
        self._online: set[tuple[str, str]] = set()     # keys whose online losses are decisively lower

    def record(self, tenant: str, agent: str, p_trained: float, p_online: float) -> None:
        """The call after `agent`'s had probability `p_trained` under the trained forecast and
        `p_online` under the online one (both made before it happened)."""
        key = (tenant, agent)
        s = self._keys.get(key)
        if s is None:
            s = _Losses()
            self._keys.set(key, s)
        else:
            self._keys.touch(key)
        lt, lo = log_loss(p_trained), log_loss(p_online)
        if len(s.pairs) == self.window:
            ot, oo = s.pairs.popleft()
            s.trained -= ot
            s.online -= oo
        s.pairs.append((lt, lo))
        s.trained += lt
        s.online += lo
        if s.trained - s.online > DECISIVE:
            self._online.add(key)
        else:
            self._online.discard(key)

    def prefers_online(self, tenant: str, agent: str) -> bool:
        """Whether the agent's forecasts now come from the online model (decided at `record`;
        read per live workflow on every refresh of PBKV-TA's densities)."""
        return (tenant, agent) in self._online

    def losses(self, tenant: str, agent: str) -> tuple[float, float, int] | None:
        """(trained, online) summed loss and the outcomes they cover, or None."""
        s = self._keys.get((tenant, agent))
        return None if s is None else (s.trained, s.online, len(s.pairs))

    def online_agents(self) -> int:
        """(tenant, agent) pairs whose forecasts now come from the online model."""
        return len(self._online)

    def __len__(self) -> int:
        return len(self._keys)

    def state_bytes(self) -> int:
        return sum(200 + 72 * len(s.pairs) for s in self._keys.values())

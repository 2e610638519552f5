"""Online K-step agent forecasts: what PBKV-TA forecasts with where its trained predictor knows nothing.

PBKV-TA's trained predictor knows only the agents of its training logs. Without one (a live
engine with no `--predictor`), or for a workflow whose current agent it never saw, every thread
density was 0, so those blocks ranked with the dead ones. This module is the fallback:
per tenant, a sliding-window first-order Markov model of agent transitions (CacheSage's
`TransitionLearner`, `policies/transitions.py`): each workflow's consecutive agents, and END
when its framework ends it.
From a workflow's current agent, the K-step joint distribution over the agents it can reach
(and END) is propagated exactly through the learned transitions, END absorbing; an agent with no
observed successor yet ends the forecast there (nothing is known of what follows it). Only the
reachable agents are kept, so the cost does not grow with the tenant's agent count (a trace
without identity names an agent per system prompt: thousands). Rows are cached per current
agent until the tenant learns something.

Where the predictor does know the agent it is kept, unless the online model has forecast that
agent's successors better (`forecast_judge.py`: a predictor trained on another application with
the same agent names). Mixing the two by their recent log loss was measured and did not pay
(docs/notes/results-details.md, "Online forecasts").
Nothing reads a clock. State per tenant: its agents, one window per agent, one table.
"""

from __future__ import annotations

import numpy as np

from agentrt.policies.transitions import END, TransitionLearner


class _Tenant:
    __slots__ = ("learner", "rows", "version")

    def __init__(self, window: int) -> None:
        self.learner = TransitionLearner(window)
        self.rows: dict[str, tuple] = {}     # current agent -> (reachable agent -> column, (K, n) probs)
        self.version = 0                     # learner.observations when `rows` was filled


class OnlineSteps:
    def __init__(self, horizon: int, window: int = 32) -> None:
        if horizon < 1:
            raise ValueError(f"horizon must be >= 1, got {horizon}")
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        self.horizon = horizon
        self.window = window
        self._tenants: dict[str, _Tenant] = {}

    def observe(self, tenant: str, src: str, dst: str) -> None:
        """A workflow of `tenant` called `dst` (an agent, or END) after `src`."""
        t = self._tenants.get(tenant)
        if t is None:
            t = self._tenants[tenant] = _Tenant(self.window)
        t.learner.observe(src, dst)

    def next_prob(self, tenant: str, src: str, dst: str) -> float:
        """P(the call after `src`'s is `dst`'s, or END) as learned so far (0 if never seen)."""
        t = self._tenants.get(tenant)
        return t.learner.next_probs(src).get(dst, 0.0) if t is not None else 0.0

    def rows(self, tenant: str, agent: str) -> tuple[dict[str, int], np.ndarray] | None:
        """For a workflow whose latest call was `agent`: the agents it can reach within K calls
        (each with its column, first reached first) and P(the k-th next call is made by each),
        shape (K, n); None if nothing was learned after `agent`."""
        t = self._tenants.get(tenant)
        if t is None:
            return None
        if t.version != t.learner.observations:
            t.rows.clear()
            t.version = t.learner.observations
        got = t.rows.get(agent)
        if got is None:
            if not t.learner.next_probs(agent):
                return None
            got = t.rows[agent] = self._propagate(t.learner, agent)
        return got

    def _propagate(self, learner: TransitionLearner, agent: str) -> tuple[dict[str, int], np.ndarray]:
        cols: dict[str, int] = {}
        steps: list[dict[str, float]] = []
        dist = {agent: 1.0}
        for _ in range(self.horizon):
            nxt: dict[str, float] = {}
            for a, p in dist.items():
                for b, q in learner.next_probs(a).items():
                    if b != END:
                        nxt[b] = nxt.get(b, 0.0) + p * q
            for b in nxt:
                if b not in cols:
                    cols[b] = len(cols)
            steps.append(nxt)
            dist = nxt
        out = np.zeros((self.horizon, len(cols)))
        for k, d in enumerate(steps):
            for b, p in d.items():
                out[k, cols[b]] = p
        return cols, out

    def state_bytes(self) -> int:
        n = 0
        for t in self._tenants.values():
            n += t.learner.state_bytes() + sum(200 + r[1].nbytes for r in t.rows.values())
        return n

"""How PBKV-TA reads an announced tool time: a Bayesian update of the agent's learned tool waits.

Model (log space, Gaussian: tool times and estimation errors are multiplicative)
- Prior: log T ~ N(mu_p, v_p), from the latest tool waits observed after the agent's calls
  (the tenant's, per agent; every agent's while the agent has fewer than two).
- Announcement H: log T = log H + e, e ~ N(mu_e, v_e), from the latest observed log(real wait /
  announced wait) (per agent, else every agent's). A framework that is biased (always 2x
  optimistic) is corrected by mu_e; one that is exact has v_e -> 0 and is taken at its word; one
  whose estimates are noisier than the tool's own spread is weighed less than the prior.
- Posterior: precision-weighted, log T | H ~ N(m, v). The expected time left after `w` seconds
  of waiting is its mean residual life, E[T - w | T > w], taken over the agent's own observed
  tool waits mapped onto the posterior (`mapped_residual`: log x -> m + s (log x - mu_p), s =
  sqrt(v / v_p)), so the prior keeps its shape (tool waits are often multimodal: a test run and
  a file read after the same agent): a worthless announcement (v_e -> inf) leaves the observed
  waits as they are, an exact one (v_e -> 0) puts them all at the announced time. With fewer
  than two waits of the agent's own, the lognormal itself (`lognormal_residual`).
No constant is tuned: every spread is measured online. Before two waits of either kind are
seen, the caller falls back to the announced end (`timing.AgentTimes.next_start`).
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

FLOOR = 1e-12     # variance floor: a spread of exactly zero is a point mass
MIN_GAP = 1e-3    # seconds: a logged wait is at least this (log 0 is undefined)


class LogStats:
    """Mean and variance of the latest `keep` log values (running sums)."""

    __slots__ = ("values", "keep", "s1", "s2")

    def __init__(self, keep: int = 512) -> None:
        self.values: deque[float] = deque()
        self.keep = keep
        self.s1 = 0.0
        self.s2 = 0.0

    def add(self, x: float) -> None:
        self.values.append(x)
        self.s1 += x
        self.s2 += x * x
        if len(self.values) > self.keep:
            old = self.values.popleft()
            self.s1 -= old
            self.s2 -= old * old

    def __len__(self) -> int:
        return len(self.values)

    def mean_var(self) -> tuple[float, float]:
        n = len(self.values)
        m = self.s1 / n
        return m, max(self.s2 / n - m * m, 0.0)


def _upper(a: float) -> float:
    """P(Z > a) for a standard normal Z."""
    return 0.5 * math.erfc(a / math.sqrt(2.0))


def lognormal_residual(m: float, v: float, waited: float) -> float:
    """E[T - w | T > w] for log T ~ N(m, v) and w = `waited` >= 0."""
    if v < FLOOR:
        return max(math.exp(m) - waited, 0.0)
    s = math.sqrt(v)
    if waited <= 0.0:
        return math.exp(m + v / 2.0)
    a = (math.log(waited) - m) / s
    tail = _upper(a)
    if tail < 1e-300:          # far in the tail: the lognormal's asymptotic mean residual life
        return waited * v / max(math.log(waited) - m, FLOOR)
    return max(math.exp(m + v / 2.0) * _upper(a - s) / tail - waited, 0.0)


def mapped_residual(logs, m: float, v: float, mp: float, vp: float, waited: float) -> float:
    """E[T - w | T > w] over the samples with ascending logs `logs` (those of the prior, mean
    `mp`, variance `vp`) mapped onto the posterior (mean `m`, variance `v`); w = `waited`. With
    no mapped sample above w, as long again (`runtime.window`'s rule)."""
    s = math.sqrt(v / max(vp, FLOOR))
    if s < 1e-6:
        return lognormal_residual(m, 0.0, waited)
    i = 0
    if waited > 0.0:
        i = int(np.searchsorted(logs, mp + (math.log(waited) - m) / s, side="right"))
    if i >= len(logs):
        return float(waited)
    return float(np.exp(m + s * (logs[i:] - mp)).mean()) - waited


def posterior(prior: tuple[float, float], error: tuple[float, float], announced: float) -> tuple[float, float]:
    """(m, v) of log T given the prior (mean, var) of log T, the error (mean, var) of log(T / H)
    and the announced H > 0."""
    mp, vp = prior
    me, ve = error
    obs = math.log(announced) + me
    vp, ve = max(vp, FLOOR), max(ve, FLOOR)
    w = vp / (vp + ve)              # the weight of the announcement
    return mp + w * (obs - mp), vp * ve / (vp + ve)

"""What PBKV-TA learns online about agents: duration windows and dropped path tails.

- Durations of one kind (a service time, a gap after an agent's calls) are a `SampleWindow`
  (`runtime/window.py`): their mean and mean residual time after some has passed (heavy-tailed
  waits: a call that has waited long is likely to wait longer, so "overdue" never means "due now").
- Tool waits the framework announced (`CallFinished.tool_expected_s`) are read against the
  agent's logged tool waits and the logged errors of earlier announcements (`announced.py`).
- `thread_density`: a thread's expected hits per second of residency from the predictor's step
  probabilities and the expected step times.
- `Tail`: the latest counts of blocks at the end of a thread's path that its next call did not
  reuse (`dropped`), and P(dropped <= j) for a block j blocks above the leaf.
Both keep a bounded window (`keep`), sorted for O(log n) queries; nothing reads a clock.
"""

from __future__ import annotations

import bisect
import math

import numpy as np

from agentrt.policies.pbkv.announced import MIN_GAP, LogStats, lognormal_residual, mapped_residual, posterior
from agentrt.runtime.window import MAX_AGENT_KEYS, SampleWindow, TenantKeyed, window_in

TINY = 1e-6   # seconds: floor of an expected residency (a use due now is not infinitely dense)


def thread_density(p: np.ndarray, rel: np.ndarray) -> np.ndarray:
    """Hit density of each agent's thread: `p[k, a]` the predictor's joint P(step k+1 is a's call),
    `rel[k]` seconds from now to step k+1 (K+1 entries, the last past the horizon). With f_k the
    chance the thread is first used at step k and F their sum, the density is F over the expected
    residency sum_k f_k rel_k + (1 - F) rel_K (kept to the horizon if unused)."""
    first = p.copy()
    first[1:] *= np.cumprod(1.0 - p, axis=0)[:-1]
    f_total = first.sum(axis=0)
    life = first.T @ rel[:-1] + (1.0 - f_total) * rel[-1]
    return f_total / np.maximum(life, TINY)


class AgentTimes:
    """Service times (arrival -> finish) and gaps (finish -> the workflow's next arrival) per
    (tenant, agent), the gaps also by whether the call ended in a tool call; unknown agents take
    the mean over all."""

    __slots__ = ("svc", "gap", "svc_all", "gap_all", "tool_log", "tool_log_all", "err_log",
                 "err_log_all", "_inflight", "_since")

    def __init__(self) -> None:
        # per-agent tables, bounded max-min by tenant (`TenantKeyed`)
        self.svc: dict[tuple[str, str], SampleWindow] = TenantKeyed(MAX_AGENT_KEYS)
        self.gap: dict[tuple[str, str, bool], SampleWindow] = TenantKeyed(MAX_AGENT_KEYS)
        self.svc_all = SampleWindow()
        self.gap_all = SampleWindow()
        # announced tool times (`announced.py`): log tool waits, and log(real / announced) waits
        self.tool_log: dict[tuple[str, str], LogStats] = TenantKeyed(MAX_AGENT_KEYS)
        self.tool_log_all = LogStats()
        self.err_log: dict[tuple[str, str], LogStats] = TenantKeyed(MAX_AGENT_KEYS)
        self.err_log_all = LogStats()
        self._inflight: dict[int, tuple[float, str]] = {}     # rid -> (arrival, agent)
        # (tenant, workflow) -> its latest finish: (time, agent, ended in a tool call, announced tool time)
        self._since: dict[tuple[str, str], tuple[float, str, bool, float | None]] = {}

    def arrived(self, now: float, info) -> None:
        self._inflight[info.rid] = (now, info.agent)
        last = self._since.pop(info.key, None)
        if last is not None:
            t_fin, prev, tool, expected = last
            gap = max(0.0, now - t_fin)
            window_in(self.gap, (info.tenant, prev, tool), MAX_AGENT_KEYS, SampleWindow).add(gap)
            self.gap_all.add(gap)
            if tool:
                x = math.log(max(gap, MIN_GAP))
                window_in(self.tool_log, (info.tenant, prev), MAX_AGENT_KEYS, LogStats).add(x)
                self.tool_log_all.add(x)
                if expected:
                    x -= math.log(expected)
                    window_in(self.err_log, (info.tenant, prev), MAX_AGENT_KEYS, LogStats).add(x)
                    self.err_log_all.add(x)

    def finished(self, now: float, info, tool_call: bool, expected_s: float | None = None) -> None:
        started = self._inflight.pop(info.rid, None)
        if started is not None:
            d = now - started[0]
            window_in(self.svc, (info.tenant, started[1]), MAX_AGENT_KEYS, SampleWindow).add(d)
            self.svc_all.add(d)
        if expected_s is not None:
            expected_s = max(expected_s, MIN_GAP)      # "no wait at all" is a very short one
        self._since[info.key] = (now, started[1] if started else info.agent, tool_call, expected_s)

    def ended(self, key: tuple[str, str]) -> None:
        self._since.pop(key, None)

    def svc_mean(self, tenant: str, agent: str, default: float, elapsed: float = 0.0) -> float:
        d = self.svc.get((tenant, agent))
        if d is None or not d.n:
            d = self.svc_all
        return d.residual(elapsed, default)

    def gap_mean(self, tenant: str, agent: str, tool: bool | None, default: float,
                 elapsed: float = 0.0) -> float:
        """Mean (residual) gap after the agent's calls: of the call's kind if known and seen,
        else of both kinds, else of every agent."""
        d = self.gap.get((tenant, agent, tool)) if tool is not None else None
        if d is None or not d.n:
            a = self.gap.get((tenant, agent, False))
            b = self.gap.get((tenant, agent, True))
            if a is not None and b is not None and a.n and b.n:
                wa, wb = len(a.ordered), len(b.ordered)
                return (wa * a.residual(elapsed, default) + wb * b.residual(elapsed, default)) / (wa + wb)
            d = a if a is not None and a.n else b if b is not None and b.n else self.gap_all
        return d.residual(elapsed, default)

    def next_start(self, wf, now: float, svc_all: float, gap_all: float) -> float:
        """Expected start of the workflow's next call, given how long the current wait has lasted.
        Where the framework announced the tool's duration: the mean residual of the agent's tool
        wait given the announcement (`announced.py`), or, before two waits and two errors are
        observed, the announced end until it is overdue; else the learned mean residual gap."""
        if wf.running:
            # the latest call is in flight: it arrived at last_seen (the runtime's arrival time)
            agent = wf.path[-1]
            left = self.svc_mean(wf.tenant, agent, svc_all, max(0.0, now - wf.last_seen))
            return now + left + self.gap_mean(wf.tenant, agent, None, gap_all)
        since = self._since.get(wf.key)
        if since is None:
            return now
        t_fin, agent, tool, expected = since
        waited = max(0.0, now - t_fin)
        if expected:
            key = (wf.tenant, agent)
            prior = _stats(self.tool_log.get(key), self.tool_log_all)
            error = _stats(self.err_log.get(key), self.err_log_all)
            if prior is not None and error is not None:
                m, v = posterior(prior, error, expected)
                # the agent's tool-wait window holds the samples of `tool_log[key]`: with two of
                # them, `prior` is theirs
                own = self.gap.get((wf.tenant, agent, True))
                if own is not None and len(own) >= 2:
                    return now + mapped_residual(own.log_values(MIN_GAP), m, v, *prior, waited)
                return now + lognormal_residual(m, v, waited)
            if waited < expected:
                return now + (expected - waited)
        return now + self.gap_mean(wf.tenant, agent, tool, gap_all, waited)

    def entries(self) -> int:
        return len(self.svc) + len(self.gap) + len(self.tool_log) + len(self.err_log)


def _stats(own: LogStats | None, every: LogStats) -> tuple[float, float] | None:
    """(mean, var) of the agent's own log values when it has two, else of every agent's, else None."""
    if own is not None and len(own) >= 2:
        return own.mean_var()
    return every.mean_var() if len(every) >= 2 else None


def dropped(leaf, hash_ids) -> int:
    """Blocks at the end of the path to `leaf` that a prompt with `hash_ids` does not reuse."""
    path = []
    node = leaf
    while node is not None and node.parent is not None:
        path.append(node.hash)
        node = node.parent
    path.reverse()
    common = 0
    for a, b in zip(path, hash_ids):
        if a != b:
            break
        common += 1
    return len(path) - common


class Tail(SampleWindow):
    """The latest `keep` observed counts of blocks at the end of a thread's path that its next
    call did not reuse; `kept(j)`: the share of them that would have kept the block `j` blocks
    above the leaf (P(dropped <= j))."""

    __slots__ = ()

    def kept(self, j: int) -> float:
        if j < 0:
            return 1.0
        return bisect.bisect_right(self.ordered, j) / len(self.ordered)

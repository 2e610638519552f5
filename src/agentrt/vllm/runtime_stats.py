"""The hosted runtime's numbers (`HostedRuntime.stats()`): what the event log's "stats" lines and
the connector's Prometheus metrics (`prom.py`) read.

Cumulative counts (`counts`, kv_hints counts, the reorderer's and the host tier's) and current
sizes, plus the policy's own `Policy.stats()` as `policy_*` keys. A policy whose stats raise, or
are anything but finite numbers under string names, fails as a raise in `observe` would: the
runtime is switched off (`HostedRuntime.fail`) and vLLM carries on with LRU. A mixin of
`HostedRuntime`.
"""

from __future__ import annotations

import math


class RuntimeStats:
    def _policy_stats(self) -> dict:
        """The policy's own numbers, as `policy_*` keys; a policy failing here fails nothing else.
        Anything but a finite number under a string key is the policy's bug: it fails as a raise
        would (the stats go into the JSON event log and Prometheus)."""
        try:
            out = {}
            for k, v in self.policy.stats().items():
                if not isinstance(k, str) or not isinstance(v, (int, float)) or not math.isfinite(v):
                    raise TypeError(f"Policy.stats() must map names to finite numbers, got {k!r}: {v!r}")
                out[f"policy_{k}"] = v
            return out
        except Exception as exc:  # noqa: BLE001 - metrics must not take the engine down
            self.fail("policy.stats", exc)
            return {}

    def change_marker(self) -> tuple:
        """Moves whenever a figure of `stats()` other than the timing and step counts may have:
        every runtime event, count, reorder, host-tier copy and failure (cheap: once per step).
        kv_hints counts move only with an arrival, which the counts cover; the policy's own
        figures only with events and reorders."""
        host = self.host.stats if self.host is not None else None
        return (self._events, sum(self.counts.values()), len(self.mirror), self.failed, self.retention.changes,
                self.orderer.stats.runs if self.orderer is not None else 0,
                (host.saved, host.loaded, host.dropped, host.skipped) if host is not None else None)

    def stats(self) -> dict:
        own = self._policy_stats() if not self.failed else {}
        out = dict(self.counts, mirrored=len(self.mirror), failed=self.failed,
                   policy=self.cfg.policy, reorder=self.reorder, events=self._events,
                   live_workflows=len(self.runtime.workflows),
                   workflows_capped=self.runtime.forced_ends,
                   workflows_silenced=self.runtime.silent_ends, runtime_s=round(self.runtime_time.seconds, 4),
                   runtime_max_s=round(self.runtime_time.max_seconds, 5),
                   hook_s=round(self.hook_time.seconds, 4), hook_max_s=round(self.hook_time.max_seconds, 5),
                   steps=self.steps, **self.hint_counts.as_dict(), **own)
        if self.runtime.net is not None:
            out.update(self.runtime.net.stats())
        if self.orderer is not None:
            st = self.orderer.stats
            out.update(reorders=st.runs, relinks=st.relinks, moved=st.moved, scored=st.scored,
                       reorders_deferred=st.deferred,
                       reorder_s=round(st.time.seconds, 4), reorder_max_s=round(st.time.max_seconds, 5))
        if self.host is not None:
            out.update(host_resident=len(self.host), host_saved=self.host.stats.saved,
                       host_loaded=self.host.stats.loaded, host_dropped=self.host.stats.dropped,
                       host_skipped=self.host.stats.skipped)
        return out

"""How the hosted runtime fails: once, loudly in the log, and without taking vLLM with it.

A mixin of `HostedRuntime` (`hosted.py`). The first exception from the runtime or the policy
switches the runtime off for good: it stops reordering vLLM's free queue (vLLM carries on with
its own LRU order), the failure is logged and written to the event log, and every per-request
table and block-pool watcher it held is released. `fail_after` (a test hook in the connector's
config) raises `InjectedFault` once that many events have been observed, to exercise this path
against a real engine.
"""

from __future__ import annotations

import logging

log = logging.getLogger("vllm.agentrt")   # under vLLM's logger: its handler and level


class InjectedFault(RuntimeError):
    """Raised on purpose by the `fail_after` test hook."""


class FailSafe:
    def _injected_fault(self, where: str) -> None:
        """Raise once `fail_after` events have been observed (callers check it is set: they sit
        on the per-event and per-block paths)."""
        fa = self.cfg.fail_after
        if self._events > fa:
            raise InjectedFault(f"fail_after={fa}: injected failure {where}")

    def fail(self, where: str, exc: BaseException) -> None:
        """Switch the runtime off for good; vLLM keeps its own (LRU) order from here on."""
        if self.failed:
            return
        self.failed = True
        self.reorder = False
        log.exception("agentrt: %s failed (%r); the runtime is off, vLLM continues with LRU",
                      where, exc, exc_info=exc)
        self.elog.write("error", where=where, error=repr(exc), disabled=True)
        # nothing reads these once off: let go of the requests they hold
        self._reqs.clear()
        self._resuming.clear()
        self._preempted_at.clear()
        self._waiting.clear()
        self._plans.clear()
        self._reused.clear()
        self.tenants.clear()
        self._hinted.clear()
        self.retention.clear()
        try:
            if self._watch:
                w = self.pool._reuse_watchers
                for bid in [b for b, cb in w.items() if cb == self._on_reuse]:
                    del w[bid]
        except Exception:  # noqa: BLE001 - best effort cleanup
            pass

"""An append-only JSON-lines log of what the connector saw, for tests, debugging and `bench`.

One object per line: `{"t": unix time, "pid": ..., "role": "scheduler"|"worker", "event": ..., ...}`.
Each line is written and flushed at once: vLLM's engine process is killed without running the
connector's shutdown, so nothing may wait for a final flush. Write errors are swallowed: the log
must never fail a request.
"""

from __future__ import annotations

import json
import os
import time


class EventLog:
    def __init__(self, path: str | None, role: str) -> None:
        self.path = path
        self.role = role
        self._f = None
        if path:
            try:
                os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
                self._f = open(path, "a", buffering=1)
            except OSError:
                self._f = None

    @property
    def enabled(self) -> bool:
        return self._f is not None

    def write(self, event: str, **fields) -> None:
        if self._f is None:
            return
        rec = {"t": round(time.time(), 4), "pid": os.getpid(), "role": self.role, "event": event}
        rec.update(fields)
        try:
            self._f.write(json.dumps(rec, default=str) + "\n")
        except (OSError, ValueError, TypeError):
            pass


def read_events(path: str, event: str | None = None) -> list[dict]:
    """The log's records (those of one `event` kind if given); a torn last line is skipped."""
    out = []
    try:
        with open(path) as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if event is None or rec.get("event") == event:
                    out.append(rec)
    except FileNotFoundError:
        pass
    return out

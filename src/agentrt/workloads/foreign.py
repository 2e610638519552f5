"""What the importers of foreign traces share: typed fields of JSON lines, arrivals, atomic writes.

A foreign trace (a Dynamo agentic Mooncake file, a TraceLab round trace) is JSON Lines like a
workflow trace, read with the workflow-trace reader's line parser (`trace.lines.objects`: gzip,
UTF-8, strict JSON, bounded line length). Each line's fields are read through a `Row`, whose
accessors check type and bounds and raise `TraceError(file, line, field, message)`, the reader's
own error form: a bad line stops the import with one line naming where and what, and `-o` is left
as it was (the trace is written beside it under a temporary name and renamed when complete).

Arrivals of imported workflows are the generators' (`workloads.base`): closed loop with
`concurrency` workflows at once (all starts 0), or Poisson at `rate` workflows per second.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from agentrt.errors import AgentrtError, TraceError
from agentrt.trace.limits import MAX_TIME_MS, MAX_TOKENS, bad_text, is_int, is_number, show
from agentrt.trace.schema import Call, TraceHeader
from agentrt.trace.writer import replacing, write_trace

_MISSING = object()


class Row:
    """One JSON object of a foreign trace, its fields read with checks that name file and line."""

    __slots__ = ("path", "line", "obj", "prefix")

    def __init__(self, path: str, line: int, obj: dict, prefix: str = "") -> None:
        self.path = path
        self.line = line
        self.obj = obj
        self.prefix = prefix      # where `obj` sits in the line's object ("tools[2].")

    def error(self, field: str | None, message: str) -> TraceError:
        return TraceError(self.path, self.line, self.prefix + field if field else field, message)

    def nested(self, name: str) -> list["Row"]:
        """The objects of list field `name` as rows of their own (errors name `name[i].field`)."""
        return [Row(self.path, self.line, o, f"{self.prefix}{name}[{i}].")
                for i, o in enumerate(self.items(name, dict))]

    def get(self, name: str, aliases: tuple[str, ...] = ()) -> tuple[str, object]:
        """(the name found, its value); `_MISSING` when absent. An alias given beside its
        canonical name is refused (the formats' readers refuse that too)."""
        found = [n for n in (name, *aliases) if n in self.obj]
        if len(found) > 1:
            raise self.error(found[1], f"given beside '{found[0]}', which it is another name for")
        return (found[0], self.obj[found[0]]) if found else (name, _MISSING)

    def int(self, name: str, *, lo: int = 0, hi: int = MAX_TOKENS, default: object = _MISSING,
            aliases: tuple[str, ...] = ()) -> int:
        field, v = self.get(name, aliases)
        if v is _MISSING or v is None:
            if default is _MISSING:
                raise self.error(field, "required" if v is _MISSING else "must not be null")
            return default  # type: ignore[return-value]
        if not is_int(v) or not lo <= v <= hi:
            raise self.error(field, f"must be an integer in {lo:,}..{hi:,}, got {show(v)}")
        return v

    def number(self, name: str, *, hi: float = MAX_TIME_MS, aliases: tuple[str, ...] = ()) -> float | None:
        """A number in 0..hi, or None when absent or null."""
        field, v = self.get(name, aliases)
        if v is _MISSING or v is None:
            return None
        if not is_number(v) or not 0 <= v <= hi:
            raise self.error(field, f"must be a number in 0..{hi:g}, got {show(v)}")
        return float(v)

    def text(self, name: str, default: object = _MISSING) -> str:
        v = self.obj.get(name, _MISSING)
        if v is _MISSING or v is None:
            if default is _MISSING:
                raise self.error(name, "required" if v is _MISSING else "must not be null")
            return default  # type: ignore[return-value]
        if type(v) is not str or not v:
            raise self.error(name, f"must be a non-empty string, got {show(v)}")
        why = bad_text(v)
        if why:
            raise self.error(name, why)
        return v

    def items(self, name: str, kind: type) -> list:
        """A list whose items are all of `kind` (empty when absent or null)."""
        v = self.obj.get(name)
        if v is None:
            return []
        if type(v) is not list or any(type(x) is not kind for x in v):
            raise self.error(name, f"must be a list of {_KIND_NAMES.get(kind, kind.__name__)}, got {show(v)}")
        return v


_KIND_NAMES = {str: "strings", int: "integers", dict: "objects"}


def iso_ms(text: object) -> float | None:
    """Milliseconds since the Unix epoch of an ISO-8601 time (`...Z`, an offset, or naive UTC);
    None for anything else."""
    if type(text) is not str:
        return None
    try:
        t = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
        if t.tzinfo is None:
            t = t.replace(tzinfo=timezone.utc)
        return t.timestamp() * 1000.0
    except (ValueError, OverflowError):     # not ISO-8601; or a time past what a datetime holds
        return None


class Starts:
    """Start times (ms) of imported workflows: 0 in a closed loop, else a Poisson process."""

    def __init__(self, rate: float | None, seed: int) -> None:
        self.rate = rate
        self.rng = np.random.default_rng(seed)
        self._t = 0.0
        self._n = 0

    def next(self) -> float:
        if self.rate is not None and self._n > 0:
            self._t += float(self.rng.exponential(1000.0 / self.rate))
        self._n += 1
        return round(self._t, 3)


def check_think(row: Row, field: str, think_ms: float) -> float:
    """A think time the trace reader accepts (a sum of waits can pass the bound its parts kept)."""
    if not math.isfinite(think_ms) or think_ms > MAX_TIME_MS:
        raise row.error(field, f"the wait it gives ({think_ms:g} ms) is past {MAX_TIME_MS:g} ms, "
                               f"the most a trace allows")
    return round(think_ms, 3)


def write_atomically(out: str | Path, header: TraceHeader, calls: Iterable[Call]) -> int:
    """Write the trace to `out` only once every call is written: an error while the calls are
    produced (a bad line further down) leaves `out` as it was."""
    with replacing(out) as tmp:
        n = write_trace(tmp, header, calls)
        if n == 0:
            raise AgentrtError("no call to import (the file has no rows)")
    return n

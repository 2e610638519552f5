"""Write workflow traces: a header line, then one call per line (gzip when the name ends in .gz).

The writer emits exactly what the reader accepts; every trace the project generates goes through
here, so generated traces and the validator cannot drift apart.
"""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

import orjson
from types import TracebackType

from agentrt.trace.schema import Call, TraceHeader


class TraceWriter:
    """Context manager writing a header and calls to `path`."""

    def __init__(self, path: str | Path, header: TraceHeader) -> None:
        self.path = Path(path)
        self.header = header
        self.count = 0
        self._f: io.TextIOBase | None = None

    def __enter__(self) -> "TraceWriter":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.suffix.lower() == ".gz":
            self._f = io.TextIOWrapper(gzip.open(self.path, "wb"), encoding="utf-8")
        else:
            self._f = open(self.path, "w", encoding="utf-8")
        self._f.write(json.dumps(self.header.to_json()) + "\n")
        return self

    def write(self, call: Call) -> None:
        assert self._f is not None, "use TraceWriter as a context manager"
        self._f.write(orjson.dumps(call.to_json()).decode() + "\n")
        self.count += 1

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None


def write_trace(path: str | Path, header: TraceHeader, calls) -> int:
    """Write all `calls` to `path`; returns the number written."""
    with TraceWriter(path, header) as w:
        for c in calls:
            w.write(c)
        return w.count

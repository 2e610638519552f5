"""Write workflow traces: a header line, then one call per line (gzip when the name ends in .gz).

The writer emits exactly what the reader accepts; every trace the project generates goes through
here, so generated traces and the validator cannot drift apart.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
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


def temp_beside(out: Path) -> Path:
    """A new empty file next to `out`, with `out`'s suffix (so `.gz` still means gzip) and the
    permissions a plain new file gets: write there, then rename over `out` when complete."""
    while True:
        tmp = out.with_name(f".{out.stem}.{secrets.token_hex(4)}.part{out.suffix}")
        try:
            os.close(os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
        except FileExistsError:
            continue
        return tmp


@contextmanager
def replacing(out: str | Path) -> Iterator[Path]:
    """A temporary file beside `out` to write to: renamed over `out` when the block completes,
    removed when it raises, so `out` is never left half-written."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_beside(out)
    try:
        yield tmp
        os.replace(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise

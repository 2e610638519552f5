"""Streaming reader and validator for workflow traces (JSON Lines, optionally gzip).

The reader yields one `Call` per line, in file order, validating every rule of
../shared/TRACE_FORMAT.md as it goes; it never holds the whole file. Per-workflow state (the call
indices seen so far) is kept only until the workflow's `last` call, so memory follows the number
of open workflows, plus one id per finished workflow to catch a workflow that reappears.

A broken rule raises `TraceError(path, line, field, message)`; a reader never guesses.
Assumptions: calls of one workflow appear in issue order with increasing `call` indices, and
`after` refers only to calls already seen. A Mooncake line (no `workflow`) is a workflow of one
call with a fresh id.
"""

from __future__ import annotations

import gzip
import io
import json
import math

import orjson
from collections.abc import Iterator
from pathlib import Path

from agentrt.errors import TraceError
from agentrt.trace.schema import TRACE_VERSION, Call, TraceHeader


def open_text(path: str | Path) -> io.TextIOBase:
    """Open a trace for reading as UTF-8 text, transparently un-gzipping `.gz` files."""
    p = Path(path)
    if not p.exists():
        raise TraceError(str(path), 0, None, "no such file")
    if p.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(p, "rb"), encoding="utf-8")
    return open(p, encoding="utf-8")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))


class _Workflow:
    __slots__ = ("calls", "last_index")

    def __init__(self) -> None:
        self.calls: set[int] = set()
        self.last_index = -1


class TraceReader:
    """Iterate over the calls of a trace file, validating each line.

    `header` is available right after construction. Iterating twice re-reads the file.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self.header = self._read_header()

    def _read_header(self) -> TraceHeader:
        with open_text(self.path) as f:
            for lineno, text in enumerate(f, start=1):
                if not text.strip():
                    continue
                obj = self._parse(text, lineno)
                if "trace" not in obj:
                    return TraceHeader()
                return self._header(obj, lineno)
        return TraceHeader()

    def _parse(self, text: str, lineno: int) -> dict:
        try:
            obj = orjson.loads(text)
        except orjson.JSONDecodeError:
            try:  # the standard parser takes integers beyond 64 bits and words its errors well
                obj = json.loads(text)
            except json.JSONDecodeError as e:
                raise TraceError(self.path, lineno, None,
                                 f"not valid JSON ({e.msg} at column {e.colno})") from None
        if not isinstance(obj, dict):
            raise TraceError(self.path, lineno, None, f"expected a JSON object, got {type(obj).__name__}")
        return obj

    def _header(self, obj: dict, lineno: int) -> TraceHeader:
        if obj["trace"] != TRACE_VERSION:
            raise TraceError(self.path, lineno, "trace", f"unsupported version {obj['trace']!r}; expected {TRACE_VERSION!r}")
        if "block_size" not in obj:
            raise TraceError(self.path, lineno, "block_size", "required in a header")
        bs = obj["block_size"]
        if not _is_int(bs) or bs <= 0:
            raise TraceError(self.path, lineno, "block_size", f"must be an integer > 0, got {bs!r}")
        meta = {}
        for key in ("name", "description", "source", "license"):
            if key in obj and obj[key] is not None:
                if not isinstance(obj[key], str):
                    raise TraceError(self.path, lineno, key, f"must be a string, got {obj[key]!r}")
                meta[key] = obj[key]
        conc = obj.get("concurrency")
        if conc is not None and (not _is_int(conc) or conc <= 0):
            raise TraceError(self.path, lineno, "concurrency", f"must be an integer > 0, got {conc!r}")
        return TraceHeader(block_size=bs, concurrency=conc, has_header=True, **meta)

    def __iter__(self) -> Iterator[Call]:
        bs = self.header.block_size
        open_wfs: dict[str, _Workflow] = {}
        finished: set[str] = set()
        first = True
        with open_text(self.path) as f:
            for lineno, text in enumerate(f, start=1):
                if not text.strip():
                    continue
                obj = self._parse(text, lineno)
                if first:
                    first = False
                    if "trace" in obj:
                        continue
                if "trace" in obj:
                    raise TraceError(self.path, lineno, "trace", "a header is only allowed on the first line")
                yield self._call(obj, lineno, bs, open_wfs, finished)

    def _call(self, obj: dict, lineno: int, bs: int,
              open_wfs: dict[str, _Workflow], finished: set[str]) -> Call:
        err = self._error(lineno)
        wid = obj.get("workflow")
        explicit_wf = wid is not None
        if not explicit_wf:
            wid = f"line-{lineno}"
        elif not isinstance(wid, str) or not wid:
            raise err("workflow", f"must be a non-empty string, got {wid!r}")
        if wid in finished:
            raise err("workflow", f"workflow {wid!r} already ended with a 'last' call")
        wf = open_wfs.get(wid)
        is_first = wf is None

        agent = obj.get("agent")
        if agent is not None and not isinstance(agent, str):
            raise err("agent", f"must be a string or null, got {agent!r}")

        index = obj.get("call", len(wf.calls) if wf else 0)
        if not _is_int(index) or index < 0:
            raise err("call", f"must be an integer >= 0, got {index!r}")
        if wf is not None and index <= wf.last_index:
            raise err("call", f"index {index} does not follow the workflow's previous call {wf.last_index}")

        ts = obj.get("timestamp")
        if ts is not None and not _is_number(ts):
            raise err("timestamp", f"must be a finite number (ms), got {ts!r}")
        if is_first and ts is None:
            raise err("timestamp", "required on a workflow's first call")

        after = obj.get("after")
        if after is None:
            after_t: tuple[int, ...] = (index - 1,) if index > 0 else ()
            if wf is None and index > 0:
                raise err("call", f"first call of workflow {wid!r} has index {index} but no 'after'; its default predecessor {index - 1} was never seen")
            if wf is not None and index > 0 and (index - 1) not in wf.calls:
                raise err("after", f"default predecessor {index - 1} was never seen in workflow {wid!r}")
        else:
            if not isinstance(after, list) or not all(_is_int(a) for a in after):
                raise err("after", f"must be a list of integers, got {after!r}")
            for a in after:
                if wf is None or a not in wf.calls:
                    raise err("after", f"call {a} is not an earlier call of workflow {wid!r}")
            after_t = tuple(after)

        think = obj.get("think_ms", 0)
        if not _is_number(think) or think < 0:
            raise err("think_ms", f"must be a number >= 0, got {think!r}")

        if "input_length" not in obj:
            raise err("input_length", "required")
        n_in = obj["input_length"]
        if not _is_int(n_in) or n_in <= 0:
            raise err("input_length", f"must be an integer > 0, got {n_in!r}")
        if "output_length" not in obj:
            raise err("output_length", "required")
        n_out = obj["output_length"]
        if not _is_int(n_out) or n_out < 0:
            raise err("output_length", f"must be an integer >= 0, got {n_out!r}")

        if "hash_ids" not in obj:
            raise err("hash_ids", "required")
        hids = obj["hash_ids"]
        if not isinstance(hids, list) or not all(_is_int(h) for h in hids):
            raise err("hash_ids", "must be a list of integers")
        want = -(-n_in // bs)
        if len(hids) != want:
            raise err("hash_ids", f"expected {want} ids for input_length {n_in} at block_size {bs}, got {len(hids)}")

        ohids = obj.get("output_hash_ids", [])
        if not isinstance(ohids, list) or not all(_is_int(h) for h in ohids):
            raise err("output_hash_ids", "must be a list of integers")
        most = (n_in + n_out) // bs - n_in // bs
        if len(ohids) > most:
            raise err("output_hash_ids", f"{len(ohids)} ids but the output completes at most {most} blocks")

        last = obj.get("last")
        if last is not None and not isinstance(last, bool):
            raise err("last", f"must be true or false, got {last!r}")
        if not explicit_wf:
            last = True

        tenant = obj.get("tenant", "default")
        if not isinstance(tenant, str) or not tenant:
            raise err("tenant", f"must be a non-empty string, got {tenant!r}")

        signal = obj.get("signal")
        if signal is not None:
            if not isinstance(signal, list) or not all(_is_number(s) for s in signal):
                raise err("signal", "must be a list of finite numbers")

        if explicit_wf:
            if wf is None:
                wf = open_wfs[wid] = _Workflow()
            wf.calls.add(index)
            wf.last_index = index
            if last:
                del open_wfs[wid]
                finished.add(wid)
        return Call(workflow=wid, call=index, input_length=n_in, output_length=n_out,
                    hash_ids=hids, agent=agent, timestamp=ts, after=after_t,
                    think_ms=float(think), output_hash_ids=ohids, last=last,
                    tenant=tenant, signal=signal, line=lineno)

    def _error(self, lineno: int):
        path = self.path

        def make(field: str, message: str) -> TraceError:
            return TraceError(path, lineno, field, message)

        return make


def read_trace(path: str | Path) -> tuple[TraceHeader, Iterator[Call]]:
    """Open a trace: its header and a lazy iterator over its validated calls."""
    reader = TraceReader(path)
    return reader.header, iter(reader)

"""Streaming reader and validator for workflow traces (JSON Lines, optionally gzip).

The reader yields one `Call` per line, in file order, validating every rule of
../shared/TRACE_FORMAT.md as it goes; it never holds the whole file. Per-workflow state (the call
indices seen so far) is kept only until the workflow's `last` call, so memory follows the number
of open workflows, plus one id per finished workflow to catch a workflow that reappears, plus a
bounded record of hash-id predecessors (`chain.py`).

A broken rule raises `TraceError(path, line, field, message)`; a reader never guesses, and no
input, however malformed, gives a traceback or a hang (tests/test_trace_fuzz.py). On top of the
format, the reader enforces the bounds of `limits.py` and the chain rule of hash ids
(docs/traces.md). Workflow starts out of timestamp order are legal but replay late: the reader
counts them and, at the end of a pass, warns once on screen (`TraceWarning`).
Assumptions: calls of one workflow appear in issue order with increasing `call` indices, and
`after` refers only to calls already seen; workflow ids are global (the runtime and the replay key
workflows by id alone), so a workflow keeps the tenant of its first call. A Mooncake line (no
`workflow`) is a workflow of one call with a fresh id that no explicit id can equal
(`limits.generated_id`).
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Iterator
from pathlib import Path

from agentrt.errors import TraceError, TraceWarning
from agentrt.trace.chain import ChainCheck
from agentrt.trace.limits import (MAX_CONCURRENCY, MAX_INDEX, MAX_TIME_MS, MAX_TOKENS, bad_text,
                                  bad_workflow_id, generated_id, int_list, is_finite_float, is_int,
                                  is_number, show)
from agentrt.trace.lines import objects, open_binary
from agentrt.trace.schema import TRACE_VERSION, Call, TraceHeader


def open_text(path: str | Path) -> io.TextIOBase:
    """Open a trace for reading as UTF-8 text, transparently un-gzipping `.gz` files."""
    return io.TextIOWrapper(open_binary(path), encoding="utf-8")


class _Workflow:
    __slots__ = ("calls", "last_index", "tenant")

    def __init__(self, tenant: str) -> None:
        self.calls: set[int] = set()
        self.last_index = -1
        self.tenant = tenant


class _Starts:
    """Workflow starts out of timestamp order: counted, the first one kept for the warning."""

    __slots__ = ("latest", "latest_line", "count", "example")

    def __init__(self) -> None:
        self.latest = float("-inf")
        self.latest_line = 0
        self.count = 0
        self.example = ""

    def see(self, ts: float, lineno: int) -> None:
        if ts >= self.latest:
            self.latest, self.latest_line = ts, lineno
            return
        self.count += 1
        if not self.example:
            self.example = (f"line {lineno} starts a workflow at {ts:g} ms, after line "
                            f"{self.latest_line} started one at {self.latest:g} ms")

    def warn(self, path: str) -> None:
        if not self.count:
            return
        msg = (f"{path}: {self.count} workflow start(s) out of timestamp order (first: "
               f"{self.example}); an open-loop replay issues them late, when it reads "
               f"them, so their latencies are off. Sort the file by start time")
        # once per process and file, however many passes read it (a bench reads it once per policy)
        if msg in _WARNED:
            return
        if len(_WARNED) >= 256:
            _WARNED.clear()
        _WARNED.add(msg)
        warnings.warn(msg, TraceWarning, stacklevel=3)


_WARNED: set[str] = set()


class TraceReader:
    """Iterate over the calls of a trace file, validating each line.

    `header` is available right after construction. Iterating twice re-reads the file.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self.header = self._read_header()

    def _read_header(self) -> TraceHeader:
        for lineno, obj in objects(self.path):
            if "trace" not in obj:
                return TraceHeader()
            return self._header(obj, lineno)
        return TraceHeader()

    def _header(self, obj: dict, lineno: int) -> TraceHeader:
        err = self._error(lineno)
        if obj["trace"] != TRACE_VERSION:
            raise err("trace", f"unsupported version {show(obj['trace'])}; expected {TRACE_VERSION!r}")
        if "block_size" not in obj:
            raise err("block_size", "required in a header")
        bs = obj["block_size"]
        if not is_int(bs) or not 0 < bs <= MAX_TOKENS:
            raise err("block_size", f"must be an integer in 1..{MAX_TOKENS:,}, got {show(bs)}")
        meta = {}
        for key in ("name", "description", "source", "license"):
            if key in obj and obj[key] is not None:
                if not isinstance(obj[key], str):
                    raise err(key, f"must be a string, got {show(obj[key])}")
                why = bad_text(obj[key])
                if why:
                    raise err(key, why)
                meta[key] = obj[key]
        conc = obj.get("concurrency")
        if conc is not None and (not is_int(conc) or not 0 < conc <= MAX_CONCURRENCY):
            raise err("concurrency", f"must be an integer in 1..{MAX_CONCURRENCY:,}, got {show(conc)}")
        return TraceHeader(block_size=bs, concurrency=conc, has_header=True, **meta)

    def __iter__(self) -> Iterator[Call]:
        bs = self.header.block_size
        open_wfs: dict[str, _Workflow] = {}
        finished: set[str] = set()
        chain = ChainCheck()
        starts = _Starts()
        first = True
        for lineno, obj in objects(self.path):
            if first:
                first = False
                if "trace" in obj:
                    continue
            if "trace" in obj:
                raise TraceError(self.path, lineno, "trace", "a header is only allowed on the first line")
            c = self._call(obj, lineno, bs, open_wfs, finished, starts)
            bad = chain.check(c.tenant, c.hash_ids, c.input_length // bs, c.output_hash_ids)
            if bad is not None:
                raise TraceError(self.path, lineno, *bad)
            yield c
        starts.warn(self.path)

    def _call(self, obj: dict, lineno: int, bs: int, open_wfs: dict[str, _Workflow],
              finished: set[str], starts: _Starts) -> Call:
        err = self._error(lineno)
        wid = obj.get("workflow")
        explicit_wf = wid is not None
        if not explicit_wf:
            wid = generated_id(lineno)
        elif not isinstance(wid, str) or not wid:
            raise err("workflow", f"must be a non-empty string, got {show(wid)}")
        else:
            why = bad_workflow_id(wid)
            if why:
                raise err("workflow", why)
        if wid in finished:
            raise err("workflow", f"workflow {show(wid)} already ended with a 'last' call")
        wf = open_wfs.get(wid)
        is_first = wf is None

        tenant = obj.get("tenant", "default")
        if not isinstance(tenant, str) or not tenant:
            raise err("tenant", f"must be a non-empty string, got {show(tenant)}")
        why = bad_text(tenant)
        if why:
            raise err("tenant", why)
        if wf is not None and tenant != wf.tenant:
            raise err("tenant", f"workflow {show(wid)} started under tenant {show(wf.tenant)}, got "
                                f"{show(tenant)}; workflow ids are global, so all calls of a "
                                f"workflow belong to one tenant")

        agent = obj.get("agent")
        if agent is not None:
            if not isinstance(agent, str):
                raise err("agent", f"must be a string or null, got {show(agent)}")
            why = bad_text(agent)
            if why:
                raise err("agent", why)

        index = obj.get("call", len(wf.calls) if wf else 0)
        if not is_int(index) or not 0 <= index <= MAX_INDEX:
            raise err("call", f"must be an integer in 0..2^63-1, got {show(index)}")
        if wf is not None and index <= wf.last_index:
            raise err("call", f"index {index} does not follow the workflow's previous call {wf.last_index}")

        ts = obj.get("timestamp")
        if ts is not None and (not is_number(ts) or not 0 <= ts <= MAX_TIME_MS):
            raise err("timestamp", f"must be a finite number of ms in 0..{MAX_TIME_MS:.0e}, got {show(ts)}")
        if is_first and ts is None:
            raise err("timestamp", "required on a workflow's first call")

        after = obj.get("after")
        if after is None:
            after_t: tuple[int, ...] = (index - 1,) if index > 0 else ()
            if wf is None and index > 0:
                raise err("call", f"first call of workflow {show(wid)} has index {index} but no 'after'; "
                                  f"its default predecessor {index - 1} was never seen")
            if wf is not None and index > 0 and (index - 1) not in wf.calls:
                raise err("after", f"default predecessor {index - 1} was never seen in workflow {show(wid)}")
        else:
            if not int_list(after):
                raise err("after", f"must be a list of integers, got {show(after)}")
            for a in after:
                if wf is None or a not in wf.calls:
                    raise err("after", f"call {show(a)} is not an earlier call of workflow {show(wid)}")
            after_t = tuple(after)

        think = obj.get("think_ms", 0)
        if not is_number(think) or not 0 <= think <= MAX_TIME_MS:
            raise err("think_ms", f"must be a number >= 0 and <= {MAX_TIME_MS:.0e}, got {show(think)}")

        if "input_length" not in obj:
            raise err("input_length", "required")
        n_in = obj["input_length"]
        if not is_int(n_in) or not 0 < n_in <= MAX_TOKENS:
            raise err("input_length", f"must be an integer > 0 and <= {MAX_TOKENS:,}, got {show(n_in)}")
        if "output_length" not in obj:
            raise err("output_length", "required")
        n_out = obj["output_length"]
        if not is_int(n_out) or not 0 <= n_out <= MAX_TOKENS:
            raise err("output_length", f"must be an integer >= 0 and <= {MAX_TOKENS:,}, got {show(n_out)}")

        if "hash_ids" not in obj:
            raise err("hash_ids", "required")
        hids = obj["hash_ids"]
        if not int_list(hids):
            raise err("hash_ids", "must be a list of integers")
        want = -(-n_in // bs)
        if len(hids) != want:
            raise err("hash_ids", f"expected {want} ids for input_length {n_in} at block_size {bs}, got {len(hids)}")

        ohids = obj.get("output_hash_ids", [])
        if not int_list(ohids):
            raise err("output_hash_ids", "must be a list of integers")
        most = (n_in + n_out) // bs - n_in // bs
        if len(ohids) > most:
            raise err("output_hash_ids", f"{len(ohids)} ids but the output completes at most {most} blocks")

        last = obj.get("last")
        if last is not None and not isinstance(last, bool):
            raise err("last", f"must be true or false, got {show(last)}")
        if not explicit_wf:
            last = True

        signal = obj.get("signal")
        if signal is not None:
            if type(signal) is not list or not all(is_finite_float(s) for s in signal):
                raise err("signal", "must be a list of finite numbers")

        if is_first:
            starts.see(ts, lineno)
        if explicit_wf:
            if wf is None:
                wf = open_wfs[wid] = _Workflow(tenant)
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

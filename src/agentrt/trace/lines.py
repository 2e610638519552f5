"""Raw lines of a trace file -> JSON objects; every failure is a `TraceError` naming file and line.

Files are read as bytes (a `.gz` name is un-gzipped), so an invalid UTF-8 byte, a corrupt or
truncated gzip stream, or an unreadable file becomes an error on the line where it shows, not a
traceback. Lines are parsed with orjson; a line orjson refuses, or one where it read an integer
beyond 64 bits as a float (a top-level value, or one in a top-level list), goes to the standard parser,
which keeps big integers exact and words its errors well. NaN and Infinity are not JSON and are
refused; nesting deeper than orjson's 1024 levels is refused. A line is read at most
`limits.MAX_LINE_BYTES` at a time, so memory stays bounded however long a line is.
"""

from __future__ import annotations

import gzip
import json
import re
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import orjson

from agentrt.errors import TraceError
from agentrt.trace.limits import MAX_LINE_BYTES

_BIG = re.compile(rb"\d{20}")
_ROUNDED = 9.2e18                                # just below 2^63
_READ_ERRORS = (OSError, EOFError, zlib.error)   # gzip.BadGzipFile is an OSError


def open_binary(path: str | Path) -> BinaryIO:
    """Open a trace for reading as bytes, transparently un-gzipping `.gz` files."""
    p = Path(path)
    if not p.exists():
        raise TraceError(str(path), 0, None, "no such file")
    if p.is_dir():
        raise TraceError(str(path), 0, None, "is a directory, not a trace file")
    try:
        return gzip.open(p, "rb") if p.suffix.lower() == ".gz" else open(p, "rb")
    except OSError as e:
        raise TraceError(str(path), 0, None, f"cannot open ({e.strerror or e})") from None


def raw_lines(path: str | Path) -> Iterator[tuple[int, bytes]]:
    """(line number, bytes) for every line, blank ones included."""
    gz = Path(path).suffix.lower() == ".gz"
    with open_binary(path) as f:
        lineno = 0
        while True:
            try:
                raw = f.readline(MAX_LINE_BYTES + 1)
            except _READ_ERRORS as e:
                what = "corrupt or truncated gzip data" if gz else "cannot read the file"
                raise TraceError(str(path), lineno + 1, None, f"{what} ({e})") from None
            if not raw:
                return
            lineno += 1
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                raise TraceError(str(path), lineno, None,
                                 f"line longer than {MAX_LINE_BYTES:,} bytes (the longest a legal "
                                 f"line can be: 2 x 2^20 64-bit hash ids and the other fields)")
            yield lineno, raw


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a JSON number")


def _standard(path: str, lineno: int, raw: bytes) -> object:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise TraceError(path, lineno, None,
                         f"not valid UTF-8 (byte 0x{raw[e.start]:02x} at column {e.start + 1})") from None
    try:
        return json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as e:
        raise TraceError(path, lineno, None, f"not valid JSON ({e.msg} at column {e.colno})") from None
    except RecursionError:
        raise TraceError(path, lineno, None, "not valid JSON (nested too deeply)") from None
    except ValueError as e:            # NaN/Infinity, or an integer beyond 4,300 digits
        raise TraceError(path, lineno, None, f"not valid JSON ({str(e)[:120]})") from None


def _rounded(obj: dict) -> bool:
    """Whether orjson may have read an integer beyond 64 bits as a float: a float of at least
    2^63 in magnitude among the object's values or in a list among them."""
    for v in obj.values():
        t = type(v)
        if t is float:
            if abs(v) >= _ROUNDED:
                return True
        elif t is list and v and float in set(map(type, v)):
            if any(type(x) is float and abs(x) >= _ROUNDED for x in v):
                return True
    return False


def parse_line(path: str, lineno: int, raw: bytes) -> dict | None:
    """The JSON object on one line; None for a blank line."""
    if not raw.strip():
        return None
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        if "depth limit" in str(e) or "recursion" in str(e):
            raise TraceError(path, lineno, None, "not valid JSON (nested deeper than 1024 levels)") from None
        obj = _standard(path, lineno, raw)
    else:
        if isinstance(obj, dict) and _rounded(obj) and _BIG.search(raw) is not None:
            obj = _standard(path, lineno, raw)
    if not isinstance(obj, dict):
        raise TraceError(path, lineno, None, f"expected a JSON object, got {type(obj).__name__}")
    return obj


def objects(path: str | Path) -> Iterator[tuple[int, dict]]:
    """(line number, object) for every non-blank line."""
    p = str(path)
    for lineno, raw in raw_lines(path):
        obj = parse_line(p, lineno, raw)
        if obj is not None:
            yield lineno, obj

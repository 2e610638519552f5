"""Documented bounds on trace values, and the small type checks the reader shares (docs/traces.md).

Every bound keeps a replay finite and its arithmetic exact; a value outside one is an error, never
a guess. The simulator steps a call per block of its context, so token counts are bounded by the
longest context of today's models (2^20 tokens); times are bounded so that milliseconds still
resolve in a double and a Unix-epoch timestamp (about 1.7e12 ms) stays valid.
"""

from __future__ import annotations

import math
import re

MAX_TOKENS = 1 << 20            # input_length, output_length and block_size: at most 1,048,576 tokens
MAX_TIME_MS = 1e13              # timestamp and think_ms: 0 <= t <= 1e13 ms (year 2286 as Unix time)
MAX_INDEX = (1 << 63) - 1       # call and after: a signed 64-bit integer
MAX_CONCURRENCY = 1_000_000     # header `concurrency`
MAX_WORKFLOWS = 1_000_000       # a generated workload (generate, bench --workload, export)
MAX_REPR = 80                   # characters of a bad value quoted in an error message
# The longest legal line: MAX_TOKENS hash ids plus as many output hash ids (block_size 1, output
# as long as the prompt), each a 64-bit id of up to 20 characters and ", ": 2 x 2^20 x 22 bytes =
# 44 MiB, and 4 MiB for the other fields. A longer line is refused before it is held or parsed,
# so a small gzip file cannot make the reader allocate gigabytes.
MAX_LINE_BYTES = 48 << 20       # 50,331,648 bytes, the newline not counted

# Ids the reader makes up for lines without a `workflow` start with a control character, which an
# explicit workflow id may not contain, so the two can never collide.
GENERATED_PREFIX = "\x1fline-"
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def generated_id(lineno: int) -> str:
    """The workflow id of an unnamed line: unique in the file, impossible as an explicit id."""
    return f"{GENERATED_PREFIX}{lineno}"


def is_generated(workflow: str) -> bool:
    return workflow.startswith(GENERATED_PREFIX)


def is_int(value: object) -> bool:
    """A JSON integer (not a bool, not a float such as 1.0). Python ints have no size limit."""
    return type(value) is int


def int_list(value: object) -> bool:
    """A JSON list of integers (no bools, no floats)."""
    return type(value) is list and (not value or set(map(type, value)) == {int})


def is_number(value: object) -> bool:
    """A finite JSON number. Huge integers are numbers here; callers bound their range."""
    if type(value) is int:
        return True
    return type(value) is float and math.isfinite(value)


def is_finite_float(value: object) -> bool:
    """A number that converts to a finite double (an integer like 10**400 does not)."""
    if type(value) is float:
        return math.isfinite(value)
    if type(value) is int:
        return abs(value) <= 1.7976931348623157e308
    return False


def show(value: object) -> str:
    """`repr(value)`, cut to MAX_REPR characters, for error messages (ASCII-safe for surrogates)."""
    try:
        text = repr(value)
    except ValueError:                       # an int too long to print
        text = f"<integer of about {value.bit_length() * 0.30103:.0f} digits>"  # type: ignore[union-attr]
    except RecursionError:
        text = f"<{type(value).__name__} nested too deeply to print>"
    return text if len(text) <= MAX_REPR else text[:MAX_REPR - 3] + "..."


def bad_text(value: str) -> str | None:
    """Why `value` is not valid Unicode text (a lone surrogate), or None."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        return f"contains a lone surrogate ({show(value[e.start])}), which is not valid Unicode"
    return None


def bad_workflow_id(value: str) -> str | None:
    """Why `value` is not a valid explicit workflow id, or None."""
    m = _CONTROL.search(value)
    if m is not None:
        return f"must not contain control characters, got {show(value)}"
    return bad_text(value)

"""Malformed traces for fuzzing the reader: valid seed traces and the mutations applied to them.

Shared by tests/test_trace_fuzz.py (driven by hypothesis) and benchmarks/fuzz_traces.py (driven
by a seeded `random.Random`), both importing it as `benchmarks.trace_mutations`.
`make_case(rnd, tmp_dir)` writes one mutated trace and returns its path and the names of the
mutations applied. Mutations: byte flips, invalid UTF-8, truncation, gzip (valid, corrupt,
truncated, or plain text under a .gz name), deep nesting, huge and absurd numbers, lone
surrogates, wrong types, missing fields, unchained hash ids, workflow-id collisions, shuffled and
duplicated lines, header variants.
"""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

HEADER = {"trace": "workflow-trace/1", "block_size": 16, "name": "seed"}


def _seeds() -> list[list[dict]]:
    spec = [HEADER,
            {"workflow": "w1", "agent": "planner", "timestamp": 0, "input_length": 48, "output_length": 8, "hash_ids": [1, 2, 3]},
            {"workflow": "w1", "agent": "coder", "think_ms": 1200, "input_length": 64, "output_length": 30, "hash_ids": [4, 5, 6, 7]},
            {"workflow": "w1", "agent": "planner", "input_length": 96, "output_length": 5, "hash_ids": [1, 2, 3, 8, 9, 10], "last": True}]
    mooncake = [{"timestamp": 10 * i, "input_length": 600 + 100 * i, "output_length": 20 + i,
                 "hash_ids": [0, 1, 2][: 2 + (i % 2)] if i % 3 else [100 + i, 200 + i]} for i in range(6)]
    for m in mooncake:
        m["hash_ids"] = m["hash_ids"][: -(-m["input_length"] // 512)]
        while len(m["hash_ids"]) < -(-m["input_length"] // 512):
            m["hash_ids"].append(900 + len(m["hash_ids"]) + 10 * m["timestamp"])
    fan = [HEADER,
           {"workflow": "a", "agent": "p", "timestamp": 5, "input_length": 32, "output_length": 16,
            "hash_ids": [1, 2], "output_hash_ids": [3], "tenant": "t1", "signal": [0.5, -1.0]},
           {"workflow": "b", "timestamp": 7, "input_length": 20, "output_length": 3, "hash_ids": [50, 51]},
           {"workflow": "a", "agent": "q", "call": 1, "after": [0], "think_ms": 30.5, "input_length": 48,
            "output_length": 4, "hash_ids": [1, 2, 3], "tenant": "t1", "signal": [0.1, 0.2]},
           {"workflow": "a", "agent": "r", "call": 2, "after": [0], "input_length": 40, "output_length": 4,
            "hash_ids": [1, 2, 77], "tenant": "t1"},
           {"workflow": "a", "agent": "p", "call": 3, "after": [1, 2], "input_length": 64, "output_length": 2,
            "hash_ids": [1, 2, 3, 4], "tenant": "t1", "last": True},
           {"workflow": "b", "input_length": 36, "output_length": 1, "hash_ids": [50, 51, 52]}]
    closed = [dict(HEADER, concurrency=2)] + [
        {"workflow": f"c{w}", "agent": "x" if i % 2 else "y", "timestamp": 0 if i == 0 else None,
         "input_length": 16 * (i + 1), "output_length": 17, "hash_ids": [1000 * w + k for k in range(i + 1)],
         "last": i == 2} for w in range(3) for i in range(3)]
    for c in closed:
        if c.get("timestamp", 0) is None:
            del c["timestamp"]
    return [spec, mooncake, fan, closed]


SEEDS = _seeds()
CALL_FIELDS = ["workflow", "agent", "call", "timestamp", "after", "think_ms", "input_length",
               "output_length", "hash_ids", "output_hash_ids", "last", "tenant", "signal"]
HEADER_FIELDS = ["trace", "block_size", "name", "concurrency"]
# JSON texts, not Python values, so that the parser sees exactly these spellings
NUMBERS = ["-1", "-0.0", "0", "1.5", "1e30", "-1e30", "1e12", "1000000000000", "1e308", "1e309", "1e400",
           "18446744073709551615", "18446744073709551616", "-9223372036854775809", str(2 ** 64 + 7),
           "1" + "0" * 308, "1" + "0" * 309, "9" * 400, "9" * 5000, "NaN", "Infinity", "-Infinity",
           str(1 << 20), str((1 << 20) + 1), "4294967296", "1e-300", "true", "null"]
STRINGS = ['"\\ud800"', '"a\\udfffb"', '"\\u0000"', '"line-3"', '"line-2"', '""', '"\\n\\t"',
           '"' + "x" * 3000 + '"', '"\\ud83d\\ude00"', '"\u00e9\u4e2d"']
OTHERS = ['[]', '{}', '[1, "a"]', '[true]', '[1.0, 2.0]', '[null]', '{"a": 1}', '[[1]]', '"12"']


def _line(obj: dict) -> str:
    return json.dumps(obj, ensure_ascii=False)


def _set_field(lines: list[str], rnd: random.Random, value_text: str) -> list[str]:
    """Replace (or add) one field of one line with a raw JSON text."""
    i = rnd.randrange(len(lines))
    try:
        obj = json.loads(lines[i])
    except (ValueError, RecursionError):
        return lines
    if not isinstance(obj, dict):
        return lines
    fields = HEADER_FIELDS if "trace" in obj else CALL_FIELDS
    key = rnd.choice(fields)
    obj[key] = "@@VALUE@@"
    lines = list(lines)
    lines[i] = _line(obj).replace('"@@VALUE@@"', value_text)
    return lines


def _edit_obj(lines: list[str], rnd: random.Random, fn) -> list[str]:
    idx = [i for i, t in enumerate(lines) if '"trace"' not in t] or list(range(len(lines)))
    i = rnd.choice(idx)
    try:
        obj = json.loads(lines[i])
    except (ValueError, RecursionError):
        return lines
    if not isinstance(obj, dict):
        return lines
    fn(obj)
    lines = list(lines)
    lines[i] = _line(obj)
    return lines


def _unchain(obj: dict, rnd: random.Random) -> None:
    h = obj.get("hash_ids")
    if isinstance(h, list) and h:
        kind = rnd.randrange(3)
        if kind == 0:
            obj["hash_ids"] = [h[0]] * len(h)
        elif kind == 1 and len(h) > 1:
            obj["hash_ids"] = list(reversed(h))
        else:
            obj["hash_ids"] = [rnd.choice([1, 2, 3, 50])] + h[1:]


def mutate_lines(lines: list[str], rnd: random.Random) -> tuple[list[str], str]:
    kind = rnd.choice(["number", "string", "other", "delete", "nest", "unchain", "shuffle", "dup",
                       "collide", "rawline", "huge_output", "ts_order"])
    if kind == "number":
        return _set_field(lines, rnd, rnd.choice(NUMBERS)), kind
    if kind == "string":
        return _set_field(lines, rnd, rnd.choice(STRINGS)), kind
    if kind == "other":
        return _set_field(lines, rnd, rnd.choice(OTHERS + NUMBERS + STRINGS)), kind
    if kind == "delete":
        return _edit_obj(lines, rnd, lambda o: o.pop(rnd.choice(list(o)), None) if o else None), kind
    if kind == "nest":
        depth = rnd.choice([10, 500, 999, 1000, 1025, 3000, 20000])
        nested = "[" * depth + "1" + "]" * depth if rnd.random() < 0.7 else '{"a":' * depth + "1" + "}" * depth
        if rnd.random() < 0.5:
            return _set_field(lines, rnd, nested), kind
        lines = list(lines)
        lines.insert(rnd.randrange(len(lines) + 1), nested)
        return lines, kind
    if kind == "unchain":
        return _edit_obj(lines, rnd, lambda o: _unchain(o, rnd)), kind
    if kind == "shuffle":
        lines = list(lines)
        rnd.shuffle(lines)
        return lines, kind
    if kind == "dup":
        lines = list(lines)
        i = rnd.randrange(len(lines))
        lines.insert(rnd.randrange(len(lines) + 1), lines[i])
        return lines, kind
    if kind == "collide":
        return _edit_obj(lines, rnd, lambda o: o.__setitem__("workflow", f"line-{rnd.randrange(1, 8)}")), kind
    if kind == "rawline":
        lines = list(lines)
        lines.insert(rnd.randrange(len(lines) + 1), rnd.choice(
            ["", "   ", "null", "[1,2]", '"x"', "{", '{"trace": "workflow-trace/1", "block_size": 16}',
             '{"trace": "workflow-trace/9"}', "NaN", '{"timestamp": NaN, "input_length": 1}']))
        return lines, kind
    if kind == "huge_output":
        return _edit_obj(lines, rnd, lambda o: o.__setitem__(
            rnd.choice(["output_length", "input_length"]), rnd.choice([10 ** 12, 2 ** 40, 1 << 20, (1 << 20) + 1]))), kind
    # ts_order: move a workflow start earlier in time than the ones before it
    return _edit_obj(lines, rnd, lambda o: o.__setitem__("timestamp", rnd.choice([-5, 0, 1, 3.5]))), kind


def mutate_bytes(data: bytes, rnd: random.Random) -> tuple[bytes, str]:
    kind = rnd.choice(["flip", "utf8", "truncate", "none"])
    if not data or kind == "none":
        return data, "none"
    b = bytearray(data)
    if kind == "flip":
        for _ in range(rnd.randint(1, 8)):
            b[rnd.randrange(len(b))] = rnd.randrange(256)
    elif kind == "utf8":
        i = rnd.randrange(len(b) + 1)
        b[i:i] = rnd.choice([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xe2\x82", b"\x80\x80", b"\xf8\x88\x80\x80\x80"])
    else:
        del b[rnd.randrange(len(b)):]
    return bytes(b), kind


def gzip_variant(data: bytes, rnd: random.Random) -> tuple[bytes, str]:
    kind = rnd.choice(["valid", "corrupt", "truncate", "plain", "empty", "double"])
    if kind == "plain":
        return data, "gz-plain"
    if kind == "empty":
        return b"", "gz-empty"
    gz = gzip.compress(data)
    if kind == "double":
        return gzip.compress(gz), "gz-double"
    if kind == "valid":
        return gz, "gz-valid"
    b = bytearray(gz)
    if kind == "corrupt":
        for _ in range(rnd.randint(1, 4)):
            b[rnd.randrange(len(b))] ^= 1 << rnd.randrange(8)
        return bytes(b), "gz-corrupt"
    return bytes(b[: rnd.randrange(len(b))]), "gz-truncate"


def make_case(rnd: random.Random, tmp_dir: Path, name: str = "case") -> tuple[Path, list[str]]:
    """Write one mutated trace under `tmp_dir`; returns its path and the mutations applied."""
    seed = rnd.choice(SEEDS)
    lines = [_line(o) for o in seed]
    applied = []
    for _ in range(rnd.choice([1, 1, 1, 2, 3])):
        lines, kind = mutate_lines(lines, rnd)
        applied.append(kind)
    data = ("\n".join(lines) + rnd.choice(["\n", "", "\r\n"])).encode("utf-8", "surrogatepass")
    data, kind = mutate_bytes(data, rnd) if rnd.random() < 0.35 else (data, "none")
    if kind != "none":
        applied.append(kind)
    if rnd.random() < 0.2:
        data, kind = gzip_variant(data, rnd)
        applied.append(kind)
        path = tmp_dir / f"{name}.jsonl.gz"
    else:
        path = tmp_dir / f"{name}.jsonl"
    path.write_bytes(data)
    return path, applied

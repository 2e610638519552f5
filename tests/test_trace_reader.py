import gzip
import json

import pytest

from agentrt.errors import TraceError
from agentrt.trace import Call, TraceHeader, TraceReader, write_trace

from conftest import MOONCAKE_CONV, needs_shared

HEADER = {"trace": "workflow-trace/1", "block_size": 16, "name": "two-agent example"}
EXAMPLE = [
    HEADER,
    {"workflow": "w1", "agent": "planner", "timestamp": 0, "input_length": 48, "output_length": 8, "hash_ids": [1, 2, 3]},
    {"workflow": "w1", "agent": "coder", "think_ms": 1200, "input_length": 64, "output_length": 30, "hash_ids": [4, 5, 6, 7]},
    {"workflow": "w1", "agent": "planner", "input_length": 96, "output_length": 5, "hash_ids": [1, 2, 3, 8, 9, 10], "last": True},
]


def test_spec_example_reads_with_defaults(trace_file):
    r = TraceReader(trace_file(EXAMPLE))
    assert r.header.block_size == 16 and r.header.name == "two-agent example"
    calls = list(r)
    assert [c.call for c in calls] == [0, 1, 2]
    assert [c.after for c in calls] == [(), (0,), (1,)]
    assert calls[1].think_ms == 1200 and calls[0].think_ms == 0
    assert calls[0].tenant == "default" and calls[0].output_hash_ids == []
    assert calls[2].last is True and calls[0].last is None
    assert calls[0].timestamp == 0 and calls[1].timestamp is None
    assert calls[2].line == 4


def test_mooncake_line_is_a_one_call_workflow(trace_file):
    calls = list(TraceReader(trace_file([
        {"timestamp": 0, "input_length": 1000, "output_length": 10, "hash_ids": [0, 1]},
        {"timestamp": 5, "input_length": 513, "output_length": 1, "hash_ids": [0, 2], "extra": "kept"},
    ])))
    assert calls[0].workflow != calls[1].workflow
    assert all(c.last and c.agent is None and c.call == 0 for c in calls)


def test_gzip_and_roundtrip(tmp_path):
    calls = list(TraceReader(_write(tmp_path / "a.jsonl", EXAMPLE)))
    n = write_trace(tmp_path / "b.jsonl.gz", TraceHeader(block_size=16, name="x"), calls)
    assert n == 3
    with gzip.open(tmp_path / "b.jsonl.gz", "rt") as f:
        assert json.loads(f.readline())["trace"] == "workflow-trace/1"
    again = list(TraceReader(tmp_path / "b.jsonl.gz"))
    for a, b in zip(calls, again):
        a.line = b.line = 0
        assert a.to_json() == b.to_json()


def _write(path, objs):
    path.write_text("".join(json.dumps(o) + "\n" for o in objs))
    return path


BAD = [
    # (lines after the header, line number of the error, field, fragment of the message)
    ([{"workflow": "w", "input_length": 16, "output_length": 1, "hash_ids": [1]}], 2, "timestamp", "required"),
    ([{"workflow": "w", "timestamp": 0, "input_length": 17, "output_length": 1, "hash_ids": [1]}], 2, "hash_ids", "expected 2"),
    ([{"workflow": "w", "timestamp": 0, "input_length": 0, "output_length": 1, "hash_ids": []}], 2, "input_length", "> 0"),
    ([{"workflow": "w", "timestamp": 0, "input_length": 16, "output_length": -1, "hash_ids": [1]}], 2, "output_length", ">= 0"),
    ([{"workflow": "w", "timestamp": 0, "output_length": 1, "hash_ids": [1]}], 2, "input_length", "required"),
    ([{"workflow": "w", "timestamp": 0, "input_length": 16, "output_length": 1}], 2, "hash_ids", "required"),
    ([{"workflow": "w", "timestamp": 0, "input_length": 16, "output_length": 1, "hash_ids": ["a"]}], 2, "hash_ids", "integers"),
    ([{"workflow": "w", "timestamp": "x", "input_length": 16, "output_length": 1, "hash_ids": [1]}], 2, "timestamp", "number"),
    ([{"workflow": "w", "timestamp": 0, "think_ms": -1, "input_length": 16, "output_length": 1, "hash_ids": [1]}], 2, "think_ms", ">= 0"),
    ([{"workflow": "w", "timestamp": 0, "input_length": 16, "output_length": 1, "hash_ids": [1], "after": [3]}], 2, "after", "not an earlier call"),
    ([{"workflow": "w", "timestamp": 0, "input_length": 16, "output_length": 1, "hash_ids": [1], "last": True},
      {"workflow": "w", "input_length": 16, "output_length": 1, "hash_ids": [1]}], 3, "workflow", "already ended"),
    ([{"workflow": "w", "timestamp": 0, "call": 1, "input_length": 16, "output_length": 1, "hash_ids": [1], "after": []},
      {"workflow": "w", "call": 1, "input_length": 16, "output_length": 1, "hash_ids": [1]}], 3, "call", "does not follow"),
    ([{"workflow": "w", "timestamp": 0, "input_length": 16, "output_length": 16, "hash_ids": [1], "output_hash_ids": [2, 3]}], 2, "output_hash_ids", "at most 1"),
    ([{"workflow": "w", "timestamp": 0, "input_length": 16, "output_length": 1, "hash_ids": [1], "last": "yes"}], 2, "last", "true or false"),
    ([{"workflow": "w", "timestamp": 0, "input_length": 16, "output_length": 1, "hash_ids": [1], "tenant": 3}], 2, "tenant", "string"),
    ([{"workflow": "w", "timestamp": 0, "input_length": 16, "output_length": 1, "hash_ids": [1], "signal": [1, "a"]}], 2, "signal", "numbers"),
    ([{"workflow": "w", "timestamp": 0, "input_length": True, "output_length": 1, "hash_ids": [1]}], 2, "input_length", "integer"),
    (['{"workflow": "w", "timestamp": 0,'], 2, None, "not valid JSON"),
    (["[1, 2]"], 2, None, "JSON object"),
    ([HEADER], 2, "trace", "first line"),
]


@pytest.mark.parametrize("lines,lineno,field,fragment", BAD)
def test_bad_lines_name_file_line_and_field(trace_file, lines, lineno, field, fragment):
    path = trace_file([HEADER] + lines)
    with pytest.raises(TraceError) as ei:
        list(TraceReader(path))
    e = ei.value
    assert (e.line, e.field) == (lineno, field), str(e)
    assert fragment in e.message
    assert str(e).startswith(f"{path}:{lineno}: ")


def test_bad_header(trace_file):
    with pytest.raises(TraceError, match="block_size"):
        TraceReader(trace_file([{"trace": "workflow-trace/1"}]))
    with pytest.raises(TraceError, match="unsupported version"):
        TraceReader(trace_file([{"trace": "workflow-trace/9", "block_size": 4}]))


def test_missing_file(tmp_path):
    with pytest.raises(TraceError, match="no such file"):
        TraceReader(tmp_path / "nope.jsonl")


def test_reader_streams(tmp_path):
    """A reader yields lines as it reads them: an error far down the file comes after the good calls."""
    lines = [HEADER] + [{"timestamp": i, "input_length": 16, "output_length": 1, "hash_ids": [i]} for i in range(100)]
    lines.append({"timestamp": 0, "input_length": 16})
    path = _write(tmp_path / "s.jsonl", lines)
    it = iter(TraceReader(path))
    got = [next(it) for _ in range(100)]
    assert len(got) == 100
    with pytest.raises(TraceError):
        next(it)


@needs_shared
def test_mooncake_trace_reads_unchanged():
    r = TraceReader(MOONCAKE_CONV)
    assert r.header.block_size == 512 and not r.header.has_header
    n = sum(1 for _ in r)
    assert n == 12031


def test_call_to_json_defaults_roundtrip():
    c = Call(workflow="w", call=2, input_length=20, output_length=3, hash_ids=[1, 2], after=(0, 1), agent="a")
    j = c.to_json()
    assert j["after"] == [0, 1] and "think_ms" not in j and "tenant" not in j

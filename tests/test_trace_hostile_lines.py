"""Hostile trace lines: an over-long line (a gzip bomb) and a workflow that changes tenant."""

from __future__ import annotations

import gzip
import json
import tracemalloc
from pathlib import Path

import pytest

from agentrt.errors import TraceError
from agentrt.trace import TraceReader, lines
from agentrt.trace.limits import MAX_LINE_BYTES

HEADER = {"trace": "workflow-trace/1", "block_size": 16}
CALL = {"workflow": "w", "timestamp": 0, "input_length": 16, "output_length": 1, "hash_ids": [1]}


def _gzip_with_long_line(path: Path, mib: int) -> Path:
    """A header, then one call line padded to `mib` MiB (compresses about 1000:1)."""
    with gzip.open(path, "wb", compresslevel=9) as f:
        f.write(json.dumps(HEADER).encode() + b"\n" + json.dumps(CALL)[:-1].encode() + b', "pad": "')
        chunk = b"a" * (1 << 20)
        for _ in range(mib):
            f.write(chunk)
        f.write(b'"}\n')
    return path


def _padded(obj: dict, n: int) -> str:
    """`obj` as a JSON line of exactly `n` bytes (spaces before the closing brace)."""
    text = json.dumps(obj)
    assert len(text) <= n
    return text[:-1] + " " * (n - len(text)) + "}"


def test_overlong_gzip_line_is_refused_in_bounded_memory(tmp_path):
    path = _gzip_with_long_line(tmp_path / "bomb.jsonl.gz", 128)
    assert path.stat().st_size < 1 << 20            # small on disk, 128 MiB unzipped
    tracemalloc.start()
    try:
        with pytest.raises(TraceError) as ei:
            list(TraceReader(path))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    e = ei.value
    assert (e.path, e.line, e.field) == (str(path), 2, None)
    assert f"line longer than {MAX_LINE_BYTES:,} bytes" in e.message
    assert str(e).startswith(f"{path}:2: ")
    assert peak < 3 * MAX_LINE_BYTES, peak          # unbounded, it was about 3.4 x 128 MiB


def test_bound_is_exact_at_the_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(lines, "MAX_LINE_BYTES", 200)
    at_limit = _padded(CALL, 200)
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(HEADER) + "\n" + at_limit + "\n")
    assert len(list(TraceReader(path))) == 1
    path.write_text(json.dumps(HEADER) + "\n" + at_limit)                 # no newline at the end
    assert len(list(TraceReader(path))) == 1
    path.write_text(json.dumps(HEADER) + "\n" + _padded(CALL, 201) + "\n")
    with pytest.raises(TraceError, match=r"t\.jsonl:2: line longer than 200 bytes"):
        list(TraceReader(path))


def test_longest_legal_line_still_reads(tmp_path):
    """2^20 hash ids and 2^20 output hash ids at block size 1, each a 20-digit 64-bit id written with
    `, `: the longest line the other bounds allow (about 44 MiB) fits under the line bound."""
    n, top = 1 << 20, (1 << 64) - 1
    call = {"workflow": "w", "timestamp": 0, "input_length": n, "output_length": n,
            "hash_ids": list(range(top - 2 * n + 1, top - n + 1)),
            "output_hash_ids": list(range(top - n + 1, top + 1)), "last": True}
    line = json.dumps(call).encode()
    assert 44 << 20 < len(line) <= MAX_LINE_BYTES
    path = tmp_path / "long.jsonl.gz"
    with gzip.open(path, "wb", compresslevel=1) as f:
        f.write(json.dumps({"trace": "workflow-trace/1", "block_size": 1}).encode() + b"\n" + line + b"\n")
    del call, line
    (c,) = list(TraceReader(path))
    assert len(c.hash_ids) == len(c.output_hash_ids) == n and c.output_hash_ids[-1] == top


def _write(path: Path, objs: list[dict]) -> Path:
    path.write_text("".join(json.dumps(o) + "\n" for o in [HEADER] + objs))
    return path


def test_workflow_changing_tenant_is_an_error_naming_tenant_and_workflow(tmp_path):
    path = _write(tmp_path / "t.jsonl", [dict(CALL, tenant="A"), dict(CALL, tenant="B", timestamp=None, last=True)])
    with pytest.raises(TraceError) as ei:
        list(TraceReader(path))
    assert (ei.value.line, ei.value.field) == (3, "tenant")
    assert "workflow 'w' started under tenant 'A', got 'B'" in ei.value.message


def test_two_tenants_sharing_a_workflow_id_get_the_tenant_error_not_a_call_error(tmp_path):
    path = _write(tmp_path / "t.jsonl", [dict(CALL, tenant="A"), dict(CALL, tenant="B", call=0)])
    with pytest.raises(TraceError) as ei:
        list(TraceReader(path))
    assert (ei.value.line, ei.value.field) == (3, "tenant")
    assert "workflow ids are global" in ei.value.message


def test_workflows_that_keep_their_tenant_read(tmp_path):
    calls = list(TraceReader(_write(tmp_path / "t.jsonl", [
        dict(CALL, workflow="A/w", tenant="A"), dict(CALL, workflow="B/w", tenant="B"),
        {k: v for k, v in CALL.items() if k != "timestamp"} | {"workflow": "A/w", "tenant": "A", "last": True},
        dict(CALL, workflow="d"), dict(CALL, workflow="d", tenant="default", timestamp=None)])))
    assert [(c.workflow, c.tenant) for c in calls] == [("A/w", "A"), ("B/w", "B"), ("A/w", "A"),
                                                       ("d", "default"), ("d", "default")]

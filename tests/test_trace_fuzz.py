"""Fuzzing the trace reader: no input gives a traceback or a hang (issue 11, item 5).

Malformed traces come from benchmarks/trace_mutations.py (valid seeds mutated by byte flips, truncation,
gzip corruption, deep nesting, huge numbers, surrogates, wrong types, missing fields, unchained
hash ids, id collisions, unsorted starts), driven by hypothesis. 1,000 go through the reader API
and `agentrt stats`, 300 more through `agentrt bench`; each example runs under a time limit, so a
hang fails the test. The only exception allowed is the project's own `AgentrtError`, and a
`TraceError` must name the file, the line and (where there is one) the field.
Below them, one regression test per reported finding.
"""

from __future__ import annotations

import gzip
import json
import random
import signal
import warnings
from contextlib import contextmanager

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from agentrt.cli import app
from agentrt.errors import AgentrtError, TraceError, TraceWarning
from agentrt.trace.reader import TraceReader
from agentrt.trace.writer import write_trace
from agentrt.workloads.stats import compute_stats
from benchmarks.trace_mutations import make_case

LIMIT_S = 20
runner = CliRunner()


class Hang(Exception):
    pass


@contextmanager
def time_limit(seconds: float):
    def alarm(*_):
        raise Hang(f"still running after {seconds} s")
    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def assert_clean(exc: BaseException | None, path) -> None:
    """None, a normal exit, or the project's own error naming file, line and field."""
    if exc is None or (isinstance(exc, SystemExit) and exc.code in (0, None)):
        return
    if isinstance(exc, Hang):
        raise AssertionError(f"{path}: hang") from exc
    if not isinstance(exc, AgentrtError):
        raise AssertionError(f"{path}: traceback {type(exc).__name__}: {exc}") from exc
    if isinstance(exc, TraceError):
        assert str(exc).startswith(f"{exc.path}:{exc.line}: "), str(exc)
        assert exc.path == str(path), str(exc)
        if exc.field:
            assert f"field '{exc.field}'" in str(exc), str(exc)


def _case(seed: int, tmp_path_factory, name: str):
    return make_case(random.Random(seed), tmp_path_factory.mktemp("fuzz"), name)


def fuzz_settings(n: int) -> settings:
    return settings(max_examples=n, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@pytest.mark.slow
@fuzz_settings(1000)
@given(seed=st.integers(0, 2 ** 32 - 1))
def test_reader_and_stats_never_traceback_or_hang(seed, tmp_path_factory):
    path, applied = _case(seed, tmp_path_factory, "r")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TraceWarning)
        exc = None
        try:
            with time_limit(LIMIT_S):
                r = TraceReader(path)
                compute_stats(r, r.header.block_size)
        except BaseException as e:   # noqa: BLE001 - classified below
            exc = e
        assert_clean(exc, path)
        with time_limit(LIMIT_S):
            res = runner.invoke(app, ["stats", str(path)])
        assert_clean(res.exception, path)
        if res.exception is None:
            assert "Traceback" not in res.output


@pytest.mark.slow
@fuzz_settings(300)
@given(seed=st.integers(0, 2 ** 32 - 1))
def test_bench_never_tracebacks_or_hangs(seed, tmp_path_factory):
    path, applied = _case(seed, tmp_path_factory, "b")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TraceWarning)
        with time_limit(LIMIT_S):
            res = runner.invoke(app, ["bench", "--trace", str(path), "--policies", "lru",
                                      "--quiet", "--gpu-blocks", "256"])
    assert_clean(res.exception, path)


# --------------------------------------------------------------------- the reported findings
HEADER = {"trace": "workflow-trace/1", "block_size": 16}


def call(**kw):
    base = {"workflow": "w", "timestamp": 0, "input_length": 16, "output_length": 1, "hash_ids": [1]}
    base.update(kw)
    return base


def lines_file(path, objs, raw_tail: bytes = b""):
    path.write_bytes("".join(json.dumps(o) + "\n" for o in objs).encode() + raw_tail)
    return path


def read_all(path):
    return list(TraceReader(path))


def error_of(path) -> TraceError:
    with pytest.raises(TraceError) as ei:
        read_all(path)
    return ei.value


def test_invalid_utf8_names_its_line(tmp_path):
    e = error_of(lines_file(tmp_path / "u.jsonl", [HEADER, call()], b'{"workflow": "\xff"}\n'))
    assert e.line == 3 and "UTF-8" in e.message


@pytest.mark.parametrize("cut", ["truncate", "corrupt", "plain"])
def test_broken_gzip_is_a_trace_error(tmp_path, cut):
    data = gzip.compress("".join(json.dumps(o) + "\n" for o in [HEADER] + [call(workflow=f"w{i}") for i in range(200)]).encode())
    if cut == "truncate":
        data = data[: len(data) // 2]
    elif cut == "corrupt":
        data = data[:40] + bytes(b ^ 0x55 for b in data[40:60]) + data[60:]
    else:
        data = b"not gzip at all\n"
    p = tmp_path / "t.jsonl.gz"
    p.write_bytes(data)
    with pytest.raises(TraceError, match=r"gzip|JSON|UTF-8"):
        read_all(p)


def test_deep_nesting_and_huge_numbers(tmp_path):
    deep = "[" * 1000 + "]" * 1000
    p = tmp_path / "d.jsonl"
    p.write_text(json.dumps(HEADER) + "\n" + json.dumps(call()).replace('"hash_ids": [1]', f'"hash_ids": {deep}') + "\n")
    assert error_of(p).field == "hash_ids"
    p.write_text(json.dumps(HEADER) + "\n" + "[" * 5000 + "]" * 5000 + "\n")
    assert "nested" in error_of(p).message
    for text, field in (("1" + "0" * 309, "timestamp"), ("1e400", "timestamp"), ("9" * 5000, None)):
        p.write_text(json.dumps(HEADER) + "\n" + json.dumps(call()).replace('"timestamp": 0', f'"timestamp": {text}') + "\n")
        assert error_of(p).field == field


def test_lone_surrogate_in_agent_is_rejected_by_stats(tmp_path):
    p = tmp_path / "s.jsonl"
    p.write_text(json.dumps(HEADER) + "\n" + json.dumps(call(agent="x")).replace('"x"', '"\\ud800"') + "\n")
    res = runner.invoke(app, ["stats", str(p)])
    assert isinstance(res.exception, TraceError) and res.exception.field == "agent"


@pytest.mark.parametrize("field,value", [("output_length", 10 ** 12), ("input_length", 2 ** 21),
                                         ("timestamp", -1), ("timestamp", 1e30), ("think_ms", 1e30)])
def test_absurd_values_are_rejected(tmp_path, field, value):
    e = error_of(lines_file(tmp_path / "a.jsonl", [HEADER, call(**{field: value})]))
    assert e.field == field


def test_unsorted_starts_warn_on_screen(tmp_path):
    p = lines_file(tmp_path / "o.jsonl", [HEADER, call(workflow="a", timestamp=100, hash_ids=[1]),
                                          call(workflow="b", timestamp=5, hash_ids=[2])])
    with pytest.warns(TraceWarning, match="1 workflow start"):
        read_all(p)
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-m", "agentrt.cli", "stats", str(p)], capture_output=True, text=True)
    assert out.returncode == 0 and "warning: " in out.stderr and "out of timestamp order" in out.stderr


def test_unsorted_starts_warn_once_per_file_however_many_passes(tmp_path):
    import warnings
    p = lines_file(tmp_path / "o.jsonl", [HEADER, call(workflow="a", timestamp=100, hash_ids=[1]),
                                          call(workflow="b", timestamp=5, hash_ids=[2])])
    with pytest.warns(TraceWarning, match="1 workflow start"):
        read_all(p)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        read_all(p)
    assert not [w for w in seen if issubclass(w.category, TraceWarning)]


def test_unchained_hash_ids_are_rejected(tmp_path):
    e = error_of(lines_file(tmp_path / "c.jsonl", [HEADER, call(input_length=48, hash_ids=[1, 1, 1])]))
    assert e.field == "hash_ids" and "positions 0 and 1" in e.message
    e = error_of(lines_file(tmp_path / "p.jsonl", [HEADER, call(workflow="a", input_length=32, hash_ids=[1, 2]),
                                                   call(workflow="b", input_length=32, hash_ids=[3, 2])]))
    assert (e.line, e.field) == (3, "hash_ids") and "predecessor" in e.message
    # other tenants have their own ids
    read_all(lines_file(tmp_path / "t.jsonl", [HEADER, call(workflow="a", input_length=32, hash_ids=[1, 2]),
                                               call(workflow="b", input_length=32, hash_ids=[3, 2], tenant="x")]))


def test_large_integer_ids_are_accepted(tmp_path):
    big = [2 ** 64, 10 ** 300, -(2 ** 70)]
    calls = read_all(lines_file(tmp_path / "b.jsonl", [HEADER, call(input_length=48, hash_ids=big)]))
    assert calls[0].hash_ids == big and all(type(h) is int for h in calls[0].hash_ids)


def test_explicit_line_ids_do_not_collide_with_generated_ones(tmp_path):
    p = lines_file(tmp_path / "l.jsonl", [
        {"timestamp": 0, "input_length": 16, "output_length": 1, "hash_ids": [1]},
        {"timestamp": 1, "input_length": 16, "output_length": 1, "hash_ids": [2]},
        {"workflow": "line-2", "timestamp": 2, "input_length": 16, "output_length": 1, "hash_ids": [3]},
        {"workflow": "line-1", "timestamp": 3, "input_length": 16, "output_length": 1, "hash_ids": [4]}])
    calls = read_all(p)
    assert len({c.workflow for c in calls}) == 4
    out = tmp_path / "again.jsonl"
    from agentrt.trace.schema import TraceHeader
    write_trace(out, TraceHeader(block_size=512), calls)
    again = read_all(out)
    assert [c.workflow for c in again[2:]] == ["line-2", "line-1"]
    assert "workflow" not in json.loads(out.read_text().splitlines()[1])
    with pytest.raises(TraceError, match="control characters"):
        read_all(lines_file(tmp_path / "x.jsonl", [call(workflow="\x1fline-1")]))


def test_last_call_finishing_before_a_parallel_branch(tmp_path):
    """A fan-out branch may outlive the `last` call: the workflow ends when both have finished."""
    p = lines_file(tmp_path / "f.jsonl", [
        HEADER,
        call(workflow="a", input_length=32, output_length=16, hash_ids=[1, 2]),
        call(workflow="a", call=1, after=[0], input_length=48, output_length=400, hash_ids=[1, 2, 3]),
        call(workflow="a", call=2, after=[0], input_length=40, output_length=1, hash_ids=[1, 2, 77], last=True)])
    res = runner.invoke(app, ["bench", "--trace", str(p), "--policies", "lru,cachesage,pbkv-lae", "--quiet"])
    assert res.exception is None, res.output

"""`agentrt import dynamo`: Dynamo's agentic Mooncake rows as workflows (tests/data fixture, bad rows)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from agentrt.bench.runner import BenchOptions, run_bench
from agentrt.bench.source import file_source
from agentrt.errors import AgentrtError, TraceError
from agentrt.trace.reader import TraceReader
from agentrt.workloads.dynamo import import_dynamo
from agentrt.workloads.stats import trace_stats
from trace_helpers import by_workflow

DATA = Path(__file__).resolve().parent / "data"
FIXTURE = DATA / "dynamo_agentic_mooncake.jsonl"
BS = 64


def test_fixture_sessions_joined_into_workflows(tmp_path):
    out = tmp_path / "dyn.jsonl"
    s = import_dynamo(FIXTURE, out, BS)
    assert (s.workflows, s.calls, s.sessions, s.joined) == (3, 8, 4, 1)
    r = TraceReader(out)
    calls = list(r)
    assert r.header.block_size == BS and r.header.concurrency is None     # open loop, as DynoSim
    wfs = by_workflow(calls)
    assert list(wfs) == ["trajectory-a", "trajectory-b", "request_3"]     # in order of their starts
    a = wfs["trajectory-a"]
    # the subagent session (c-1, c-2) runs between a-2 and a-3, joined by wait_for
    assert [c.agent for c in a] == ["main", "main", "subagent", "subagent", "main"]
    assert [c.after for c in a] == [(), (0,), (1,), (2,), (3,)]
    assert [c.think_ms for c in a] == [0.0, 150.0 + 3800.0, 40.0, 2100.0, 300.0]   # delay + tool_wait_ms
    assert [c.timestamp for c in a] == [0.0, None, None, None, None]
    assert [bool(c.last) for c in a] == [False] * 4 + [True]
    assert wfs["trajectory-b"][0].timestamp == 2000.0 and wfs["request_3"][0].timestamp == 3000.0
    # hash ids as recorded: a-2 extends a-1's four full blocks; b shares the harness's system prompt
    assert a[1].hash_ids[:4] == a[0].hash_ids[:4]
    assert wfs["trajectory-b"][0].hash_ids[:3] == a[0].hash_ids[:3]
    st = trace_stats(out)
    assert st.reuse_across > 0 and st.reuse_within > 0


def test_imported_trace_replays_in_bench(tmp_path):
    out = tmp_path / "dyn.jsonl"
    import_dynamo(FIXTURE, out, BS, concurrency=2)
    assert TraceReader(out).header.concurrency == 2
    doc = run_bench(file_source(out), ["lru", "infinite"], BenchOptions())
    assert doc["calls"] == 8 and doc["workflows"] == 3
    assert doc["results"]["lru"]["hit_rate"] == pytest.approx(doc["results"]["infinite"]["hit_rate"])


def rows(*objs: dict) -> str:
    return "".join(json.dumps(o) + "\n" for o in objs)


def req(rid: str, **kw) -> dict:
    return {"request_id": rid, "session_id": "s", "input_length": 100, "output_length": 5,
            "hash_ids": [1, 2], "timestamp": 0.0, **kw}


def test_aliases_extra_ids_and_independent_rows(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text(rows(
        {"request_id": "r1", "session_id": "s", "input_tokens": 70, "output_tokens": 3,
         "hash_ids": [5, 6, 7], "created_time": 1_000.0},        # the third id carries no token
        {"request_id": "r2", "session_id": "s", "input_length": 64, "output_length": 1,
         "hash_ids": [5], "created_time": 4_500.0},               # no wait_for: its offset is kept
        {"request_id": "r3", "session_id": "s", "input_length": 128, "output_length": 1,
         "hash_ids": [5, 9], "wait_for": ["r1", "r2"], "delay_ms": 7.5}))
    import_dynamo(src, tmp_path / "o.jsonl", BS)
    c = list(TraceReader(tmp_path / "o.jsonl"))
    assert (c[0].input_length, c[0].output_length, c[0].hash_ids, c[0].timestamp) == (70, 3, [5, 6], 0.0)
    assert (c[1].after, c[1].think_ms, c[1].timestamp) == ((), 3500.0, None)
    assert (c[2].after, c[2].think_ms) == ((0, 1), 7.5)


BAD = [
    ("no id", [{"session_id": "s", "input_length": 1, "output_length": 1, "hash_ids": [1]}],
     1, "request_id", "required"),
    ("duplicate id", [req("r1"), req("r1")], 2, "request_id", "also the request id of line 1"),
    ("no output", [{"request_id": "r", "input_length": 10, "hash_ids": [1]}], 1, "output_length", "required"),
    ("no hash ids", [{"request_id": "r", "input_length": 10, "output_length": 1}], 1, "hash_ids", "required"),
    ("too few ids", [req("r1", input_length=200)], 1, "input_length", "--block-size"),
    ("alias beside name", [req("r1", input_tokens=100)], 1, "input_tokens", "another name"),
    ("negative delay", [req("r1"), req("r2", wait_for=["r1"], delay=-1)], 2, "delay", "0.."),
    ("unknown dependency", [req("r1", wait_for=["nope"])], 1, "wait_for", "'nope'"),
    ("self dependency", [req("r1", wait_for=["r1"])], 1, "wait_for", "itself"),
    ("cycle", [req("r1", wait_for=["r2"]), req("r2", wait_for=["r1"])], 1, "wait_for", "cycle"),
    ("unchained ids", [req("r1", hash_ids=[1, 2]), req("r2", hash_ids=[3, 2])], 2, "hash_ids", "predecessor"),
    ("newer format", [req("r1", dependencies=[])], 1, "dependencies", "wait_for"),
    ("control character session", [req("r1", session_id="a\x01b")], 1, "session_id", "control"),
]


@pytest.mark.parametrize("name,objs,line,field,text", BAD, ids=[b[0] for b in BAD])
def test_bad_rows_name_file_line_and_field(tmp_path, name, objs, line, field, text):
    src = tmp_path / "bad.jsonl"
    src.write_text(rows(*objs))
    out = tmp_path / "out.jsonl"
    out.write_text("before\n")
    with pytest.raises(TraceError) as e:
        import_dynamo(src, out, BS)
    assert (e.value.path, e.value.line, e.value.field) == (str(src), line, field)
    assert text in str(e.value)
    assert out.read_text() == "before\n"                     # -o untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl", "out.jsonl"]   # no temp file left


VALUES = st.one_of(st.none(), st.booleans(), st.integers(-3, 3000), st.floats(allow_nan=False),
                   st.text(max_size=6), st.lists(st.integers(-1, 40), max_size=30),
                   st.lists(st.sampled_from(["r0", "r1", "r2", "r3"]), max_size=3))
FIELDS = ["request_id", "session_id", "input_length", "input_tokens", "output_length", "hash_ids",
          "timestamp", "delay", "tool_wait_ms", "wait_for", "branches", "prefix_reset"]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(st.just({}), st.dictionaries(st.sampled_from(FIELDS), VALUES, max_size=3)),
                min_size=1, max_size=6),
       st.sampled_from([1, 16, 64]))
def test_any_rows_import_to_a_valid_trace_or_fail_cleanly(tmp_path, objs, bs):
    """Valid rows with up to three fields replaced by anything: a trace the reader accepts, or an
    error of agentrt's own (never a traceback)."""
    src = tmp_path / "in.jsonl"
    src.write_text(rows(*({"request_id": f"r{i}", "session_id": "s", "output_length": 3,
                           "hash_ids": [100 + i], **o} for i, o in enumerate(objs))))
    out = tmp_path / "out.jsonl"
    out.unlink(missing_ok=True)
    try:
        import_dynamo(src, out, bs)
    except AgentrtError:             # TraceError naming the line, or no row at all
        assert not out.exists()
        event("refused")
        return
    event("imported")
    calls = list(TraceReader(out))
    assert len(calls) == len(objs)


def run_cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    return subprocess.run([sys.executable, "-m", "agentrt.cli", *args], capture_output=True,
                          text=True, env=env, timeout=120)


def test_cli_one_error_line_and_exit_2(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(rows(req("r1"), req("r2", wait_for=["r9"])))
    p = run_cli("import", "dynamo", str(bad), "--block-size", "64", "-o", str(tmp_path / "o.jsonl"))
    assert p.returncode == 2 and p.stderr == (f"error: {bad}:2: field 'wait_for': waits for 'r9', "
                                              f"which no row of the file is\n")
    p = run_cli("import", "dynamo", str(FIXTURE), "-o", str(tmp_path / "o.jsonl"))
    assert p.returncode == 2 and "--block-size" in p.stderr          # the file does not say it
    p = run_cli("import", "dynamo", str(FIXTURE), "--block-size", "64", "-o", str(tmp_path / "o.jsonl"))
    assert p.returncode == 0 and "wrote 8 calls of 3 workflows from 4 sessions" in p.stdout

"""`agentrt import tracelab`: TraceLab round traces as workflows (tests/data fixture, bad rows)."""

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
from agentrt.workloads.stats import trace_stats
from agentrt.workloads.tracelab import TraceLabImporter, import_tracelab
from trace_helpers import by_workflow

FIXTURE = Path(__file__).resolve().parent / "data" / "tracelab_round_trace.jsonl"
CLAUDE = "claude:5d0c9a3e-1b7f-4c22-9e0d-3a6b8f41c2d7"
CODEX = "codex:8f1e6b2d-4a93-5c70-b1e8-92d4f0a6c3e5"


def fixture_rows() -> list[dict]:
    return [json.loads(line) for line in FIXTURE.read_text().splitlines()]


def shared(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def test_fixture_sessions_prefixes_and_waits(tmp_path):
    out = tmp_path / "tl.jsonl"
    s = import_tracelab(FIXTURE, out)
    assert (s.workflows, s.calls, s.tool_waits, s.human_waits, s.untimed) == (2, 8, 5, 1, 0)
    r = TraceReader(out)
    wfs = by_workflow(list(r))
    assert r.header.concurrency == 16 and r.header.block_size == 16
    assert list(wfs) == [CLAUDE, CODEX]
    src = {(o["session_id"], o["round_index"]): o for o in fixture_rows()}
    for sid, calls in wfs.items():
        assert {c.agent for c in calls} == {sid.split(":")[0]}           # the provider
        for k, c in enumerate(calls):
            row = src[(sid, k)]
            assert (c.input_length, c.output_length) == (row["input_tokens_total"], row["output_tokens"])
            if k:
                prev = calls[k - 1]
                context = prev.input_length + prev.output_length
                # the first prefix_tokens tokens are the previous round's context, no more
                want = min(row["prefix_tokens"], context) // 16
                assert shared(c.hash_ids, prev.hash_ids[:prev.input_length // 16] + prev.output_hash_ids) == want
    claude, codex = wfs[CLAUDE], wfs[CODEX]
    # tool waits: the previous round's slowest tool (internal latency, else wall); 95.25 s between
    # the last model output and the user's next message
    assert [c.think_ms for c in claude] == [0.0, 1320.0, 210.0, 95250.0, 24087.0]
    assert [c.think_ms for c in codex] == [0.0, 1390.0, 5001.0]
    assert shared(codex[2].hash_ids, codex[1].hash_ids) == 3456 // 16    # the provider's cache missed
    assert shared(claude[0].hash_ids, codex[0].hash_ids) == 0           # sessions share nothing
    st = trace_stats(out)
    assert st.reuse_across == 0 and 0.6 < st.reuse_within < 0.8


def test_imported_trace_replays_in_bench(tmp_path):
    out = tmp_path / "tl.jsonl"
    import_tracelab(FIXTURE, out, TraceLabImporter(rate=0.5, seed=3))
    r = TraceReader(out)
    assert r.header.concurrency is None
    starts = [c.timestamp for c in r if c.call == 0]
    assert starts[0] == 0.0 and starts[1] > 0
    doc = run_bench(file_source(out), ["lru", "infinite"], BenchOptions())
    assert doc["calls"] == 8 and doc["results"]["lru"]["hit_rate"] > 0.5


def test_rounds_ordered_per_session_and_duplicates_kept(tmp_path):
    rows = fixture_rows()
    shuffled = [rows[5], rows[3], rows[0], rows[6], rows[1], rows[3], rows[2], rows[4], rows[7]]
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(o) + "\n" for o in shuffled))
    import_tracelab(src, tmp_path / "o.jsonl")
    wfs = by_workflow(TraceReader(tmp_path / "o.jsonl"))
    assert list(wfs) == [CODEX, CLAUDE]                          # order of first appearance
    assert [c.input_length for c in wfs[CLAUDE]] == [18650, 20480, 21390, 21950, 21950, 22870]


def bad(row: dict, **change) -> dict:
    out = dict(row)
    for k, v in change.items():
        if v is None and k.startswith("drop_"):
            out.pop(k[5:])
        else:
            out[k] = v
    return out


R0 = fixture_rows()[0]
BAD = [
    ("no session", bad(R0, drop_session_id=None), "session_id", "required"),
    ("append mismatch", bad(R0, newly_append_tokens=5), "newly_append_tokens", "input_tokens_total - prefix_tokens"),
    ("prefix past total", bad(R0, prefix_tokens=10**6), "prefix_tokens", "0..18,650"),
    ("empty prompt", bad(R0, input_tokens_total=0), "input_tokens_total", "1.."),
    ("negative output", bad(R0, output_tokens=-1), "output_tokens", "integer"),
    ("bad latency", bad(R0, tools=[{"tool_wall_latency_ms": "slow"}]), "tools[0].tool_wall_latency_ms", "number"),
    ("bad time", bad(R0, timing_events=[{"event_type": "user_message", "timestamp": "yesterday"}]),
     "timing_events[0].timestamp", "ISO-8601"),
    ("tools not a list", bad(R0, tools={"a": 1}), "tools", "list of objects"),
]


@pytest.mark.parametrize("name,row,field,text", BAD, ids=[b[0] for b in BAD])
def test_bad_rows_name_file_line_and_field(tmp_path, name, row, field, text):
    src = tmp_path / "bad.jsonl"
    src.write_text(json.dumps(fixture_rows()[1]) + "\n" + json.dumps(row) + "\n")
    out = tmp_path / "out.jsonl"
    with pytest.raises(TraceError) as e:
        import_tracelab(src, out)
    assert (e.value.path, e.value.line, e.value.field) == (str(src), 2, field)
    assert text in str(e.value)
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl"]


EVENT = st.dictionaries(
    st.sampled_from(["event_type", "timestamp", "tool_wall_latency_ms", "tool_internal_latency_ms"]),
    st.one_of(st.none(), st.integers(-1, 10**14), st.text(max_size=4),
              st.sampled_from(["user_message", "text", "2026-06-02T09:12:03.5Z",
                               "0001-01-01T00:00:00+23:59"])),
    max_size=3)
VALUES = st.one_of(st.none(), st.booleans(), st.integers(-3, 40_000), st.floats(allow_nan=False),
                   st.text(max_size=8),
                   st.sampled_from(["tool_result", "user_message", "2026-06-02T09:12:03Z"]),
                   st.lists(EVENT, max_size=3))
FIELDS = ["session_id", "round_index", "input_tokens_total", "prefix_tokens", "newly_append_tokens",
          "output_tokens", "provider", "first_input_event_type", "tools", "timing_events"]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(st.just({}), st.dictionaries(st.sampled_from(FIELDS), VALUES, max_size=3)),
                min_size=1, max_size=6), st.sampled_from([1, 16]))
def test_any_rows_import_to_a_valid_trace_or_fail_cleanly(tmp_path, objs, bs):
    """Valid rows with up to three fields replaced by anything: a trace the reader accepts, or an
    error of agentrt's own (never a traceback)."""
    base = {"session_id": "s", "round_index": 0, "input_tokens_total": 300, "prefix_tokens": 100,
            "newly_append_tokens": 200, "output_tokens": 9, "first_input_event_type": "tool_result"}
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({**base, "round_index": i, **o}) + "\n" for i, o in enumerate(objs)))
    out = tmp_path / "out.jsonl"
    out.unlink(missing_ok=True)
    try:
        import_tracelab(src, out, TraceLabImporter(block_size=bs))
    except AgentrtError:
        assert not out.exists()
        event("refused")
        return
    event("imported")
    assert len(list(TraceReader(out))) == len(objs)


def test_cli_one_error_line_and_exit_2(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "agentrt.cli", "import", "tracelab", *args],
                              capture_output=True, text=True, env=env, timeout=120)
    src = tmp_path / "bad.jsonl"
    src.write_text(json.dumps(bad(R0, prefix_tokens=20_000)) + "\n")
    p = run(str(src), "-o", str(tmp_path / "o.jsonl"))
    assert p.returncode == 2 and p.stderr.startswith(f"error: {src}:1: field 'prefix_tokens': ")
    assert p.stderr.count("\n") == 1 and not (tmp_path / "o.jsonl").exists()
    p = run(str(FIXTURE), "-o", str(tmp_path / "o.jsonl"), "--rate", "1", "--concurrency", "2")
    assert p.returncode == 2 and "either --rate or --concurrency" in p.stderr
    p = run(str(FIXTURE), "-o", str(tmp_path / "o.jsonl"))
    assert p.returncode == 0 and "wrote 8 calls of 2 sessions" in p.stdout

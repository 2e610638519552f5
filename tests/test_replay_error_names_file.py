"""The replay's own trace error (a workflow without `last` flags that comes back after the
replay ended it) names the file, the line and the field, as the reader's errors do
(docs/traces.md): `error: FILE:LINE: field 'workflow': ...`."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from agentrt.engine.replay import READ_AHEAD, FileCalls, WorkflowReplay
from agentrt.errors import AgentrtError, TraceError
from agentrt.trace.reader import TraceReader

FILLERS = READ_AHEAD + 50


def _line(wid: str, call: int, ids: list[int], timestamp: float | None) -> str:
    obj = {"workflow": wid, "call": call, "input_length": 512 * len(ids), "output_length": 4,
           "hash_ids": ids}
    if timestamp is not None:
        obj["timestamp"] = timestamp
    return json.dumps(obj) + "\n"


@pytest.fixture
def comeback(tmp_path):
    """Workflow A on line 2, then READ_AHEAD + 50 one-call workflows, then A again (no
    timestamp, no `last` flags anywhere): (path, line of A's second call)."""
    path = tmp_path / "c.jsonl"
    with open(path, "w") as f:
        f.write(_line("B", 0, [1], 0))
        f.write(_line("A", 0, [1], 0))
        for i in range(FILLERS):
            f.write(_line(f"w{i}", 0, [100 + i], i))
        f.write(_line("A", 1, [1, 2], None))
    return path, FILLERS + 3


def _drain(replay: WorkflowReplay) -> None:
    """Replay every call, each finishing 1 s after it is issued."""
    while (t := replay.next_arrival()) is not None:
        for issued, c in replay.pop_arrivals(t):
            replay.finish(c, issued + 1.0)


def test_cli_error_names_file_line_and_field(comeback):
    path, line = comeback
    p = subprocess.run([sys.executable, "-m", "agentrt.cli", "bench", "--trace", str(path),
                        "--policies", "lru", "--quiet"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith(f"error: {path}:{line}: field 'workflow': workflow 'A' has no 'last' flags")
    assert "Traceback" not in p.stderr


def test_replay_finds_the_files_path(comeback):
    path, line = comeback
    replay = WorkflowReplay(FileCalls(iter(TraceReader(path)), str(path)))
    with pytest.raises(TraceError) as e:
        _drain(replay)
    assert (e.value.path, e.value.line, e.value.field) == (str(path), line, "workflow")


def test_replay_without_a_file(comeback):
    """Calls with no file behind them (a list) keep the old form; a `FileCalls` names its file."""
    path, line = comeback
    calls = list(TraceReader(path))
    with pytest.raises(AgentrtError, match=rf"^trace line {line}: field 'workflow'"):
        _drain(WorkflowReplay(iter(calls)))
    with pytest.raises(TraceError, match=rf"^given\.jsonl:{line}: field 'workflow'"):
        _drain(WorkflowReplay(FileCalls(iter(calls), "given.jsonl")))

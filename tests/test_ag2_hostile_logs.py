"""Hostile AG2 logs: each bad file is skipped with its reason, the good ones still import, the
trace written always reads back, and a failed import leaves no half-written trace."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentrt.trace.reader import TraceReader
from agentrt.workloads import ag2
from agentrt.workloads.ag2 import Ag2Importer, import_ag2, log_files

SYS = {"coder": "you write code"}
GOOD = {"history": [{"name": "user", "content": "task"}, {"name": "coder", "content": "print(1)"}],
        "system_prompt": SYS}


def _log(content: str = "print(1)", name: str = "coder", system_prompt: dict | None = None) -> str:
    return json.dumps({"history": [{"name": "user", "content": "task"}, {"name": name, "content": content}],
                       "system_prompt": SYS if system_prompt is None else system_prompt})


HOSTILE = {
    # file name -> (file text, fragment of the reason it is skipped)
    "deep.json": ('{"history": ' + "[" * 100_000 + "]" * 100_000 + ', "system_prompt": {}}',
                  "not valid JSON (nested too deeply)"),
    "bigint.json": ('{"history": [], "system_prompt": {}, "n": ' + "7" * 5000 + "}",
                    "not valid JSON (an integer of more than 4,300 digits)"),
    "surrogate.json": (_log(content="\ud800"), "history[1].content: contains a lone surrogate"),
    "surrogate_name.json": (_log(name="co\udfffder"), "history[1].name: contains a lone surrogate"),
    "surrogate_agent.json": (_log(system_prompt={"co\udfffder": "p"}),
                             "system_prompt['co\\udfffder']: contains a lone surrogate"),
    "surrogate_prompt.json": (_log(system_prompt={"coder": "p\ud800"}),
                              "system_prompt['coder']: contains a lone surrogate"),
    "bad\x01name.json": (_log(), "file name: as a workflow id it must not contain control characters"),
}


def _write_dir(d: Path, files: dict[str, str]) -> Path:
    d.mkdir(exist_ok=True)
    for name, text in files.items():
        # json.dumps escapes lone surrogates, so the files are valid UTF-8 holding "\ud800" escapes
        (d / name).write_text(text, encoding="utf-8")
    return d


def test_each_hostile_file_is_skipped_with_its_reason_and_the_good_one_imports(tmp_path):
    src = _write_dir(tmp_path / "logs", {"good.json": json.dumps(GOOD)} | {n: t for n, (t, _) in HOSTILE.items()})
    out = tmp_path / "t.jsonl"
    res = import_ag2(src, out)
    assert (res.workflows, res.calls) == (1, 1)
    bad = {Path(f).name: why for f, why in res.errors}
    assert set(bad) == set(HOSTILE)
    for name, (_, fragment) in HOSTILE.items():
        assert fragment in bad[name], (name, bad[name])
    assert [c.workflow for c in TraceReader(out)] == ["good"]


def test_cli_reports_skipped_files_one_line_each(tmp_path):
    src = _write_dir(tmp_path / "logs", {"good.json": json.dumps(GOOD)} | {n: t for n, (t, _) in HOSTILE.items()})
    out = tmp_path / "t.jsonl"
    res = subprocess.run([sys.executable, "-m", "agentrt.cli", "import", "ag2", str(src), "-o", str(out)],
                         capture_output=True, text=True, errors="backslashreplace", timeout=120)
    assert res.returncode == 0, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == len(HOSTILE)
    assert all(line.startswith((f"skipped {src}/", f"skipped '{src}/")) for line in lines)
    assert "\x01" not in res.stderr and "bad\\x01name.json" in res.stderr   # shown escaped, not raw
    assert "Traceback" not in res.stderr
    assert [c.workflow for c in TraceReader(out)] == ["good"]


def test_undecodable_file_name_is_skipped(tmp_path):
    src = _write_dir(tmp_path / "logs", {"good.json": json.dumps(GOOD)})
    try:
        (src / os.fsdecode(b"bad\xff.json")).write_text(_log())
    except (OSError, UnicodeError):
        pytest.skip("this file system does not take a file name that is not UTF-8")
    res = import_ag2(src, tmp_path / "t.jsonl")
    assert res.workflows == 1
    [(f, why)] = res.errors
    assert "file name" in why and "lone surrogate" in why
    assert [c.workflow for c in TraceReader(tmp_path / "t.jsonl")] == ["good"]


def test_calls_beyond_the_reader_bounds_are_skipped(tmp_path):
    huge = {"history": [{"name": "user", "content": "task"}, {"name": "coder", "content": "a " * 1_100_000}],
            "system_prompt": SYS}
    slow = {"history": [{"name": "user", "content": "t"}, {"name": "terminal", "content": "x"},
                        {"name": "terminal", "content": "y"}, {"name": "coder", "content": "z"}],
            "system_prompt": SYS}
    src = _write_dir(tmp_path / "logs", {"good.json": json.dumps(GOOD), "huge.json": json.dumps(huge),
                                         "slow.json": json.dumps(slow)})
    res = import_ag2(src, tmp_path / "t.jsonl", Ag2Importer(think_ms=6e12))   # two steps: 1.2e13 ms
    bad = {Path(f).name: why for f, why in res.errors}
    assert "more than the 1,048,576 a trace allows" in bad["huge.json"]
    assert "think time or start past 1e+13 ms" in bad["slow.json"]
    assert [c.workflow for c in TraceReader(tmp_path / "t.jsonl")] == ["good"]


def test_names_that_int_cannot_read_still_sort(tmp_path):
    # "²" is a digit to str.isdigit but not to int()
    src = _write_dir(tmp_path / "logs", {"1²2.json": json.dumps(GOOD), "10.json": json.dumps(GOOD),
                                         "9.json": json.dumps(GOOD)})
    assert [p.name for p in log_files(src)] == ["1²2.json", "9.json", "10.json"]


def test_failed_import_leaves_the_old_trace_and_no_partial_file(tmp_path, monkeypatch):
    src = _write_dir(tmp_path / "logs", {"1.json": json.dumps(GOOD), "2.json": json.dumps(GOOD)})
    out = tmp_path / "out" / "t.jsonl"
    out.parent.mkdir()
    out.write_text("old trace\n")
    real = Ag2Importer.workflow

    def crash_on_second(self, path, name=None):
        if path.name == "2.json":
            raise KeyboardInterrupt
        return real(self, path, name)

    monkeypatch.setattr(ag2.Ag2Importer, "workflow", crash_on_second)
    with pytest.raises(KeyboardInterrupt):
        import_ag2(src, out)
    assert out.read_text() == "old trace\n"
    assert os.listdir(out.parent) == ["t.jsonl"]


def test_successful_import_replaces_the_trace_and_keeps_gzip(tmp_path):
    src = _write_dir(tmp_path / "logs", {"1.json": json.dumps(GOOD)})
    out = tmp_path / "t.jsonl.gz"
    out.write_bytes(b"old")
    assert import_ag2(src, out).workflows == 1
    assert sorted(os.listdir(tmp_path)) == ["logs", "t.jsonl.gz"]
    with gzip.open(out, "rt") as f:
        assert json.loads(f.readline())["trace"] == "workflow-trace/1"
    assert [c.workflow for c in TraceReader(out)] == ["1"]
    assert out.stat().st_mode & 0o777 == 0o666 & ~_umask()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_a_log_larger_than_the_bound_is_skipped_before_it_is_read(tmp_path, monkeypatch):
    monkeypatch.setattr(ag2, "MAX_LOG_BYTES", 1000)
    src = _write_dir(tmp_path / "logs", {"good.json": json.dumps(GOOD), "big.json": _log(content="x" * 2000)})
    res = import_ag2(src, tmp_path / "t.jsonl")
    assert (res.workflows, res.calls) == (1, 1)
    (name, why), = res.errors
    assert Path(name).name == "big.json" and "larger than 1,000 bytes" in why


def test_an_import_of_nothing_leaves_an_existing_trace(tmp_path):
    out = tmp_path / "t.jsonl"
    out.write_text("keep me\n")
    src = _write_dir(tmp_path / "logs", {"deep.json": HOSTILE["deep.json"][0]})
    res = subprocess.run([sys.executable, "-m", "agentrt.cli", "import", "ag2", str(src), "-o", str(out)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "no log could be imported" in res.stderr
    assert out.read_text() == "keep me\n" and sorted(p.name for p in tmp_path.iterdir()) == ["logs", "t.jsonl"]

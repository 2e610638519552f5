"""The AG2/AutoGen importer: synthetic logs everywhere, the shared CaptainAgent logs when present."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentrt.bench.runner import BenchOptions, run_bench
from agentrt.bench.source import file_source
from agentrt.trace.reader import TraceReader
from agentrt.workloads.ag2 import Ag2Importer, import_ag2
from agentrt.workloads.stats import trace_stats
from agentrt.workloads.tokens import estimate_tokens
from trace_helpers import by_workflow

SHARED = Path(os.environ["AGENTRT_SHARED"]) if os.environ.get("AGENTRT_SHARED") else \
    Path(__file__).resolve().parents[2] / "shared"
AG2 = SHARED / "traces" / "ag2-captainagent"
needs_ag2 = pytest.mark.skipif(not AG2.is_dir(), reason=f"shared AG2 logs not found at {AG2} "
                               "(../shared is absent; set AGENTRT_SHARED to its path)")

SYS = {"Planner": "You plan. " * 40, "Coder": "You write Python code. " * 60}


def log(history: list, system_prompt: dict | None = None) -> dict:
    return {"question": "q", "history": history, "system_prompt": SYS if system_prompt is None else system_prompt}


def msg(name: str, content: str, role: str = "user") -> dict:
    return {"name": name, "role": role, "content": content}


GOOD = log([msg("Planner", "You are given a task: add two numbers. " * 5, "assistant"),
            msg("Coder", "```python\nprint(1 + 2)\n```" * 4),
            msg("Computer_terminal", "exitcode: 0 (execution succeeded)\nCode output: 3\n"),
            msg("Planner", "The result is 3. Please verify. " * 6),
            msg("Coder", "Verified: 3. TERMINATE")])


def write(dirpath: Path, name: str, obj) -> Path:
    p = dirpath / name
    p.write_text(obj if isinstance(obj, str) else json.dumps(obj))
    return p



def assert_threads_extend(calls, bs: int) -> int:
    """Every agent called again starts with its earlier prompt's and output's full blocks."""
    repeats = 0
    for wf in by_workflow(calls).values():
        last: dict[str, list[int]] = {}
        for c in wf:
            if c.agent in last:
                assert c.hash_ids[:len(last[c.agent])] == last[c.agent], (c.workflow, c.call)
                repeats += 1
            last[c.agent] = c.hash_ids[:c.input_length // bs] + c.output_hash_ids
    return repeats


def test_synthetic_log_structure(tmp_path):
    src = tmp_path / "logs"
    src.mkdir()
    write(src, "7.json", GOOD)
    res = import_ag2(src, tmp_path / "t.jsonl", Ag2Importer(think_ms=2500))
    assert (res.workflows, res.calls, res.errors) == (1, 3, [])
    calls = list(TraceReader(tmp_path / "t.jsonl"))
    assert [c.agent for c in calls] == ["Coder", "Planner", "Coder"]
    assert [c.workflow for c in calls] == ["7"] * 3
    assert [c.think_ms for c in calls] == [0.0, 2500.0, 0.0]     # the terminal's step
    assert calls[-1].last
    assert assert_threads_extend(calls, 16) == 1
    # the opening message is in every caller's prompt, behind its system prompt
    first = Ag2Importer(first_is_call=True).workflow(src / "7.json")
    assert [c.agent for c in first] == ["Planner", "Coder", "Planner", "Coder"]


def test_equal_text_gives_equal_ids_across_files(tmp_path):
    write(tmp_path, "1.json", GOOD)
    other = log([msg("Planner", "A different task entirely. " * 9), msg("Coder", "print('x')")])
    write(tmp_path, "2.json", other)
    import_ag2(tmp_path, tmp_path / "t.jsonl")
    calls = list(TraceReader(tmp_path / "t.jsonl"))
    coder = [c for c in calls if c.agent == "Coder"]
    sys_blocks = (estimate_tokens(SYS["Coder"]) + 4) // 16
    assert coder[0].workflow != coder[-1].workflow
    assert coder[0].hash_ids[:sys_blocks] == coder[-1].hash_ids[:sys_blocks]
    assert coder[0].hash_ids[sys_blocks + 1] != coder[-1].hash_ids[sys_blocks + 1]


def test_malformed_logs_are_reported_and_skipped(tmp_path):
    write(tmp_path, "good.json", GOOD)
    write(tmp_path, "notjson.json", "{history: [")
    write(tmp_path, "array.json", [1, 2])
    write(tmp_path, "nohistory.json", {"system_prompt": SYS})
    write(tmp_path, "badprompt.json", log([msg("Planner", "x")], system_prompt=["x"]))
    write(tmp_path, "badmsg.json", log([msg("Planner", "x"), {"name": "Coder", "content": 5}]))
    write(tmp_path, "nollm.json", log([msg("Planner", "task"), msg("Computer_terminal", "out")]))
    write(tmp_path, "empty.json", log([]))
    write(tmp_path, "README.md", "not a log, not a .json: ignored")
    res = import_ag2(tmp_path, tmp_path / "t.jsonl")
    assert res.workflows == 1
    bad = {Path(f).name: problem for f, problem in res.errors}
    assert set(bad) == {"notjson.json", "array.json", "nohistory.json", "badprompt.json",
                        "badmsg.json", "nollm.json", "empty.json"}
    assert "not valid JSON" in bad["notjson.json"]
    assert "history" in bad["nohistory.json"]
    assert "system_prompt" in bad["badprompt.json"]
    assert "history[1].content" in bad["badmsg.json"]
    assert "system prompt" in bad["nollm.json"]
    assert [c.workflow for c in TraceReader(tmp_path / "t.jsonl")] == ["good"] * 3


def test_estimate_tokens():
    assert estimate_tokens("") == 0
    assert estimate_tokens("hello world") == 2
    assert estimate_tokens("1234567") == 3
    assert estimate_tokens("a" * 25) == 3
    assert estimate_tokens("=" * 16) == 2
    assert estimate_tokens("x\n\n    y") == 3


names = st.sampled_from(["Planner", "Coder", "Computer_terminal", "User"])
texts = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=300)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history=st.lists(st.tuples(names, texts), min_size=1, max_size=10),
       bs=st.sampled_from([1, 4, 16, 64]))
def test_any_log_imports_to_a_valid_trace(tmp_path, history, bs):
    path = write(tmp_path, "h.json", log([msg(n, t) for n, t in history]))
    try:
        calls = Ag2Importer(block_size=bs).workflow(path)
    except ValueError as e:
        assert "no message from an agent" in str(e)
        return
    out = tmp_path / "h.jsonl"
    from agentrt.trace.writer import write_trace
    write_trace(out, Ag2Importer(block_size=bs).header("test"), calls)
    read = list(TraceReader(out))
    assert len(read) == sum(1 for n, _ in history[1:] if n in SYS)
    assert_threads_extend(read, bs)


@needs_ag2
def test_shared_logs_one_workflow_per_file_with_named_agents(tmp_path):
    files = sorted(AG2.glob("*.json"))
    res = import_ag2(AG2, tmp_path / "ag2.jsonl")
    assert res.errors == []
    assert res.workflows == len(files)
    calls = list(TraceReader(tmp_path / "ag2.jsonl"))
    wfs = by_workflow(calls)
    assert set(wfs) == {f.stem for f in files}
    for f in files[:40]:
        prompts = json.loads(f.read_text())["system_prompt"]
        assert {c.agent for c in wfs[f.stem]} <= set(prompts)
    assert "Computer_terminal" not in {c.agent for c in calls}
    assert any(c.think_ms > 0 for c in calls)
    assert assert_threads_extend(calls, 16) > 50
    st_ = trace_stats(tmp_path / "ag2.jsonl")
    assert st_.reuse_within > 0.3 and st_.reuse_across > 0.0


@needs_ag2
def test_shared_logs_lru_below_infinite_under_memory_pressure(tmp_path):
    out = tmp_path / "ag2.jsonl"
    import_ag2(AG2, out)
    gpu_blocks = trace_stats(out).distinct_blocks // 10
    src = file_source(out)
    try:
        doc = run_bench(src, ["lru", "infinite"], BenchOptions(gpu_blocks=gpu_blocks))
    finally:
        src.close()
    lru, inf = doc["results"]["lru"]["hit_rate"], doc["results"]["infinite"]["hit_rate"]
    assert lru < inf - 0.03, (lru, inf)

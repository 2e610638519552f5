"""End to end: `agentrt workloads`, `generate`, `stats`, `import ag2` and `bench --workload/--trace`."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from agentrt.cli import app
from agentrt.trace.reader import TraceReader

BENCHMARKS = ["hover", "swebench", "financebench", "mmlu", "mtbench", "gaia", "gsm8k", "humaneval"]
runner = CliRunner()


def agentrt(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agentrt.cli", *args], capture_output=True, text=True,
                          timeout=120)


def invoke(*args: str):
    res = runner.invoke(app, list(args))
    assert res.exit_code == 0, (res.output, res.exception)
    return res


def test_workloads_lists_every_generator_in_one_line_each():
    lines = invoke("workloads").stdout.strip().splitlines()
    listed = [line.split()[0] for line in lines]
    assert set(BENCHMARKS + ["mix", "team", "coding"]) <= set(listed)
    assert len(lines) == len(listed)


def test_generate_is_deterministic_and_valid(tmp_path):
    a, b, c = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "c.jsonl"
    invoke("generate", "hover", "-o", str(a), "--workflows", "10", "--seed", "4")
    invoke("generate", "hover", "-o", str(b), "--workflows", "10", "--seed", "4")
    invoke("generate", "hover", "-o", str(c), "--workflows", "10", "--seed", "5")
    assert a.read_bytes() == b.read_bytes() != c.read_bytes()
    r = TraceReader(a)
    assert r.header.concurrency == 16
    assert sum(1 for x in r if x.last) == 10


def test_generate_tool_scale_multiplies_think_times_only(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    invoke("generate", "swebench", "-o", str(a), "--workflows", "6", "--seed", "2")
    invoke("generate", "swebench", "-o", str(b), "--workflows", "6", "--seed", "2", "--tool-scale", "4")
    ra, rb = TraceReader(a), TraceReader(b)
    assert "x4" in rb.header.description and "x4" not in ra.header.description
    calls_a, calls_b = list(ra), list(rb)
    assert [c.hash_ids for c in calls_a] == [c.hash_ids for c in calls_b]
    assert sum(c.think_ms > 0 for c in calls_a) > 6
    for x, y in zip(calls_a, calls_b):
        assert y.think_ms == pytest.approx(4 * x.think_ms, abs=0.004)   # both rounded to 1 us


def test_generate_rejects_a_non_positive_tool_scale(tmp_path):
    res = agentrt("generate", "hover", "-o", str(tmp_path / "x.jsonl"), "--tool-scale", "0")
    assert res.returncode == 2 and "--tool-scale must be > 0" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_tools_lists_every_distribution_with_its_source():
    from agentrt.workloads.tools import TOOLS
    lines = invoke("tools").stdout.strip().splitlines()
    assert lines[0].split()[0] == "tool"
    rows = {line.split()[0]: line for line in lines[1:]}
    assert set(rows) == set(TOOLS)
    p50 = float(rows["test_run"].split()[2])
    assert 15 < p50 < 25 and "guess" in rows["test_run"]


def test_generate_with_rate_writes_open_loop_arrivals(tmp_path):
    out = tmp_path / "r.jsonl.gz"
    invoke("generate", "mix", "-o", str(out), "--workflows", "12", "--rate", "0.5")
    r = TraceReader(out)
    assert r.header.concurrency is None
    starts = [c.timestamp for c in r if c.call == 0]
    assert len(starts) == 12 and starts == sorted(starts) and starts[-1] > 0


def test_user_errors_are_one_line_and_exit_2(tmp_path):
    for args in (["generate", "hover", "-o", str(tmp_path / "x.jsonl"), "--rate", "1", "--concurrency", "2"],
                 ["generate", "nosuch", "-o", str(tmp_path / "x.jsonl")],
                 ["import", "ag2", str(tmp_path / "missing"), "-o", str(tmp_path / "x.jsonl")],
                 ["import", "ag2", str(tmp_path), "-o", str(tmp_path / "x.jsonl"), "--tokenizer", "nope"]):
        res = agentrt(*args)
        assert res.returncode == 2, (args, res.stderr)
        assert res.stderr.strip().startswith("error:") and len(res.stderr.strip().splitlines()) == 1


def test_stats_text_and_json(tmp_path):
    out = tmp_path / "f.jsonl"
    invoke("generate", "financebench", "-o", str(out), "--workflows", "20")
    text = invoke("stats", str(out)).stdout
    for key in ("calls per workflow", "mean prompt tokens", "reusable within workflow",
                "reusable across workflows", "infinite-cache hit rate", "analyst"):
        assert key in text
    doc = json.loads(invoke("stats", str(out), "--json").stdout)
    assert doc["workflows"] == 20 and doc["calls"] == 100 and doc["agent_orders"] == 1
    assert doc["agents"] == ["analyst", "calculator", "retriever", "writer"]
    assert 0 < doc["infinite_hit_rate"] == pytest.approx(doc["reuse_within"] + doc["reuse_across"])


def _log(*speakers: str) -> dict:
    return {"history": [{"name": s, "role": "user", "content": f"message {i} from {s}"}
                        for i, s in enumerate(speakers)],
            "system_prompt": {"Expert": "You are an expert. " * 30}}


def test_import_ag2_reports_bad_files_and_keeps_going(tmp_path):
    src = tmp_path / "logs"
    src.mkdir()
    (src / "1.json").write_text(json.dumps(_log("Expert", "Computer_terminal", "Expert", "Expert")))
    (src / "2.json").write_text("[")
    out = tmp_path / "t.jsonl"
    res = agentrt("import", "ag2", str(src), "-o", str(out), "--think-ms", "1500")
    assert res.returncode == 0, res.stderr
    assert res.stderr.strip().splitlines() == [f"skipped {src / '2.json'}: not valid JSON (Expecting value at line 1 column 2)"]
    calls = list(TraceReader(out))
    assert [c.think_ms for c in calls] == [1500.0, 0.0]

    (src / "1.json").write_text(json.dumps({"history": []}))
    res = agentrt("import", "ag2", str(src), "-o", str(out))
    assert res.returncode == 2
    assert len(res.stderr.strip().splitlines()) == 3    # two skipped files, then the error
    assert len(list(TraceReader(out))) == 2             # the failed import lost nothing


@pytest.mark.parametrize("name", BENCHMARKS + ["mix"])
def test_bench_runs_each_workload(name):
    res = invoke("bench", "--workload", name, "--workflows", "8", "--quiet", "--policies", "lru,belady,infinite")
    assert f"workload:{name}" in res.stdout and "lru" in res.stdout


def _defaults_of(command: str) -> dict:
    import typer.main
    cmd = typer.main.get_command(app).commands[command]
    return {p.name: p.default for p in cmd.params}


def test_generate_and_bench_share_one_set_of_defaults():
    from agentrt import defaults
    gen, bench = _defaults_of("generate"), _defaults_of("bench")
    assert gen["workflows"] == bench["workflows"] == defaults.WORKFLOWS
    assert gen["seed"] == bench["seed"] == defaults.SEED
    assert gen["concurrency"] is None and bench["concurrency"] is None   # both mean defaults.CONCURRENCY
    import inspect

    import agentrt.api
    from agentrt.commands.workloads import import_ag2_cmd
    assert inspect.signature(import_ag2_cmd).parameters["block_size"].default.default == defaults.BLOCK_SIZE
    sim = inspect.signature(agentrt.api.simulate).parameters
    assert sim["workflows"].default == defaults.WORKFLOWS and sim["preset"].default == defaults.PRESET


def test_generated_trace_replays_as_the_workload_does(tmp_path):
    """`generate NAME` + `bench --trace` replays what `bench --workload NAME` replays: same calls,
    same load, same training split, same numbers."""
    out = tmp_path / "s.jsonl"
    invoke("generate", "swebench", "-o", str(out), "--workflows", "12")
    assert TraceReader(out).header.concurrency == 16
    docs = []
    for src in (["--trace", str(out)], ["--workload", "swebench", "--workflows", "12"]):
        path = tmp_path / f"r{len(docs)}.json"
        invoke("bench", *src, "--policies", "lru,kvflow", "--gpu-blocks", "600", "--quiet", "--json", str(path))
        docs.append(json.loads(path.read_text()))
    a, b = docs
    assert a["config"]["concurrency"] == b["config"]["concurrency"] == 16
    assert a["config"]["train"]["workflows"] == b["config"]["train"]["workflows"] == 3
    for p in ("lru", "kvflow"):
        assert a["results"][p]["hit_rate"] == b["results"][p]["hit_rate"]


def test_bench_trace_and_workload_side_by_side(tmp_path):
    out = tmp_path / "g.jsonl"
    invoke("generate", "gsm8k", "-o", str(out), "--workflows", "10")
    res = invoke("bench", "--trace", str(out), "--policies", "lru,belady,infinite", "--quiet", "--json", str(tmp_path / "r.json"))
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["workflows"] == 10 and str(out) in res.stdout


def test_generate_takes_generator_options(tmp_path):
    out = tmp_path / "c.jsonl"
    r = runner.invoke(app, ["generate", "coding", "--workflows", "2", "--set", "system_tokens=14000",
                                 "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert "system_tokens=14000" in TraceReader(out).header.description
    bad = runner.invoke(app, ["generate", "coding", "--set", "system_tokens", "-o", str(out)])
    assert bad.exit_code != 0 and "OPTION=VALUE" in str(bad.exception)

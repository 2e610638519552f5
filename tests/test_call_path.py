"""The per-call TTFT split (`enginebench/call_path.py`) and its script, on hand-written logs."""

import json

import pytest

from agentrt.enginebench.call_path import join, markdown, summary


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _logs(tmp_path):
    calls = [  # a: sent at 100.000, first token 30 ms later; b sent while a streams
        {"workflow": "w1", "call": 0, "sent_wall": 100.000, "ttft_s": 0.030, "latency_s": 0.500,
         "prompt_tokens": 64, "cached_tokens": 0, "output_tokens": 8, "error": None},
        {"workflow": "w2", "call": 3, "sent_wall": 100.100, "ttft_s": 0.050, "latency_s": 0.300,
         "prompt_tokens": 96, "cached_tokens": 32, "output_tokens": 8, "error": None},
        {"workflow": "w3", "call": 0, "sent_wall": 100.200, "ttft_s": None, "latency_s": 0.010,
         "prompt_tokens": 8, "cached_tokens": 0, "output_tokens": 0, "error": "HTTPError"},
    ]
    events = [
        {"t": 99.0, "event": "arrival", "request": "warm", "workflow": "req:warm", "call": 0},
        {"t": 100.008, "event": "arrival", "request": "r1", "workflow": "w1", "call": 0},
        {"t": 100.009, "event": "lookup", "request": "r1"},
        {"t": 100.110, "event": "arrival", "request": "r2", "workflow": "w2", "call": 3},
        {"t": 100.112, "event": "lookup", "request": "r2"},      # not scheduled then (the queue)
        {"t": 100.125, "event": "lookup", "request": "r2"},      # scheduled
        {"t": 100.400, "event": "lookup", "request": "r2"},      # after its first token: ignored
    ]
    _write(tmp_path / "calls-lru.jsonl", calls)
    _write(tmp_path / "connector-lru.jsonl", events)
    return tmp_path / "calls-lru.jsonl", tmp_path / "connector-lru.jsonl"


def test_the_split_adds_up_to_the_clients_ttft_and_counts_calls_in_flight(tmp_path):
    paths = join(*_logs(tmp_path))
    assert [(p.workflow, p.call) for p in paths] == [("w1", 0), ("w2", 3)]     # the failed call is left out
    a, b = paths
    assert a.in_flight == 0 and b.in_flight == 1
    assert a.to_engine_s == pytest.approx(0.008) and a.queued_s == pytest.approx(0.001)
    assert b.to_engine_s == pytest.approx(0.010) and b.queued_s == pytest.approx(0.015)
    assert b.to_first_s == pytest.approx(0.025)
    for p in paths:
        assert p.to_engine_s + p.queued_s + p.to_first_s == pytest.approx(p.ttft_s)
    s = summary(paths)
    assert s["all"]["calls"] == 2 and s["all"]["ttft_s"] == pytest.approx(0.040)
    assert s["by_in_flight"]["0"]["calls"] == 1 and s["by_in_flight"]["1-2"]["calls"] == 1
    table = markdown("run0 lru", s)
    assert "| run0 lru | all | 2 | 40.0 | 9.0 | 8.0 | 23.0 |" in table


def test_a_bad_line_names_its_file_and_line(tmp_path):
    calls, events = _logs(tmp_path)
    events.write_text(events.read_text() + "{oops\n")
    with pytest.raises(ValueError, match=r"connector-lru.jsonl:8: not JSON"):
        join(calls, events)


def test_a_torn_last_engine_line_is_left_out_and_an_event_without_time_is_named(tmp_path):
    calls, events = _logs(tmp_path)
    whole = events.read_text()
    events.write_text(whole + '{"t": 100.5, "event": "fin')      # the server stopped mid-write
    assert len(join(calls, events)) == 2
    calls.write_text(calls.read_text() + '{"workflow": "w4"')    # the client's own log is whole
    with pytest.raises(ValueError, match=r"calls-lru.jsonl:4: not JSON"):
        join(calls, events)
    _logs(tmp_path)
    events.write_text(whole + json.dumps({"event": "lookup", "request": "r9"}) + "\n")
    with pytest.raises(ValueError, match=r"connector-lru.jsonl: lookup event of request 'r9' has no numeric 't'"):
        join(calls, events)


def test_the_script_prints_each_runs_table_and_says_when_there_is_nothing(tmp_path, capsys):
    from benchmarks.call_path import main
    _logs(tmp_path)
    out = tmp_path / "split.json"
    assert main([str(tmp_path), "--json", str(out)]) == 0
    assert "| " + tmp_path.name + " lru | all | 2 |" in capsys.readouterr().out
    assert list(json.loads(out.read_text())["runs"]) == [f"{tmp_path}:lru"]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main([str(empty)]) == 1
    assert "nothing to read" in capsys.readouterr().err


def test_side_by_side_pairs_the_same_calls_and_groups_alone_and_bursts(tmp_path):
    from agentrt.enginebench.call_path import side_by_side, side_by_side_markdown
    paths = join(*_logs(tmp_path))
    sim = [{"workflow": "w1", "call": 0, "to_engine_s": 0.004, "ttft_s": 0.020},
           {"workflow": "w2", "call": 3, "to_engine_s": 0.006, "ttft_s": 0.040},
           {"workflow": "w9", "call": 0, "to_engine_s": 0.004, "ttft_s": 0.020}]   # not live: left out
    rows = {r["in_flight"]: r for r in side_by_side(paths, sim)}
    assert rows["all"]["calls"] == 2 and rows["all"]["sim_ttft_ms"] == pytest.approx(30.0)
    assert rows["all"]["live_ttft_ms"] == pytest.approx(40.0)
    assert rows["sent alone"]["calls"] == 2 and "in a burst" not in rows     # 100 ms apart
    assert rows["1-2"]["sim_rest_ms"] == pytest.approx(34.0) and rows["1-2"]["live_rest_ms"] == pytest.approx(40.0)
    assert "| run0 lru | 1-2 | 1 | 50.0 / 40.0 | 10.0 / 6.0 | 40.0 / 34.0 |" in side_by_side_markdown("run0 lru", list(rows.values()))


def test_the_simulators_call_log_has_every_call_with_its_path_inside_its_ttft(tmp_path):
    from pathlib import Path

    from agentrt.enginebench.call_path import simulate
    from agentrt.trace.writer import write_trace
    from agentrt.workloads.base import GenConfig
    from agentrt.workloads.registry import get_workload
    preset = Path(__file__).resolve().parents[1] / "docs" / "results" / "engine" / "preset-vllm-cpu-tiny-256x32.json"
    trace = tmp_path / "team.jsonl"
    wl, cfg = get_workload("team"), GenConfig(workflows=4, seed=0, block_size=32, concurrency=2)
    write_trace(trace, wl.header(cfg), wl.generate(cfg))
    log = simulate(trace, preset, "lru", 255)
    lines = [ln for ln in trace.read_text().splitlines()[1:] if ln.strip()]
    assert len(log) == len(lines) and {(c["workflow"], c["call"]) for c in log} == {
        (str(json.loads(ln)["workflow"]), json.loads(ln)["call"]) for ln in lines}
    for c in log:
        # the preset's request path (5.2 ms) delays every call; the engine's wait may add to it
        assert 0.005 <= c["to_engine_s"] < c["ttft_s"] <= c["latency_s"]
        assert 0 <= c["cached_tokens"] <= c["prompt_tokens"]

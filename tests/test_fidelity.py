"""agentrt.enginebench.fidelity and benchmarks/fidelity.py: live medians against the simulator
on the same calls, the order check, and the tables (with and without vLLM's iteration log)."""

from __future__ import annotations

import pytest

from agentrt.enginebench.fidelity import bracket, compare, order_agrees
from bench_scripts import load_script

fid = load_script("fidelity")


def live(hit: float, ttft: float, busy: float | None = None) -> dict:
    r = {"hit_rate": hit, "ttft_mean_s": ttft, "ttft_p90_s": 2 * ttft, "e2e_mean_s": 10 * ttft,
         "tpot_mean_s": 0.01, "makespan_s": 20.0, "inflight_s": 15.0, "output_blocks_live": 5}
    if busy is not None:        # as the runner writes a run with --engine-iterations
        r["engine_iterations"] = {"busy_s": busy}
        r["busy_s"] = busy
        r["engine_phases"] = {"ttft": ttft / 2, "queue": 0.01, "prefill": ttft / 4, "inter_token": 0.008,
                              "decode": 0.5, "e2e": 1.0}
        r["token_stalls"] = {"threshold_s": 0.1, "client_stalls": round(100 * ttft), "client_stalled_s": 10 * ttft,
                             "client_gaps": 500, "engine_stalls": 2, "engine_gaps": 500}
    return r


def sim(hit: float) -> dict:
    return {"hit_rate": hit, "ttft_mean_s": 0.05, "wait_mean_s": 0.02, "ttft_p90_s": 0.1, "e2e_mean_s": 1.0,
            "tpot_mean_s": 0.006, "makespan_s": 15.0, "busy_s": 9.0}


def test_live_medians_ranges_and_ratios_per_policy():
    docs = [{"results": {"lru": live(h, t, b), "pbkv-ta": live(h + 0.1, t)}}
            for h, t, b in ((0.50, 0.10, 8.0), (0.52, 0.30, 10.0), (0.51, 0.20, 9.0))]
    out = compare(docs, {"results": {"lru": sim(0.53), "pbkv-ta": sim(0.64)}}, ["lru", "pbkv-ta"], "fcfs")
    f = out["policies"]["lru"]
    assert f["runs"] == 3 and f["live_hit"] == 0.51 and f["live_hit_range"] == [0.50, 0.52]
    assert f["live_ttft_mean_s"] == 0.2 and f["ttft_mean_s_ratio"] == pytest.approx(0.25)
    assert f["live_busy_s"] == 9.0 and f["sim_busy_s"] == 9.0 and f["busy_s_ratio"] == 1.0
    assert "live_busy_s" not in out["policies"]["pbkv-ta"]
    assert order_agrees(out["policies"]) == []
    out["settings"] = {"command": "python -m benchmarks.fidelity --workload team"}
    text = fid.markdown({"team": out})
    assert "| team | lru | 51.0 (50.0-52.0) | 53.0 |" in text
    # only lru's runs logged their iterations: one row, with the time in flight and no iteration
    assert "Where the time goes" in text and "| team | lru | 9.0 | 9.0 | 15.0 | 6.0 | 20.0 | 15.0 | 10.0 | 6.0 |" in text
    assert "| team | pbkv-ta | " not in text.split("Where the time goes")[1]
    # vLLM's own phases: client TTFT 200 ms, vLLM's 100, queue 10, prefill 50 (150 before it is
    # scheduled); the simulator's 50 ms, 20 of them waiting for admission; TPOT 10 ms against 8
    assert f["ttft_split"] == pytest.approx({"live_to_scheduled_s": 0.15, "sim_to_scheduled_s": 0.02,
                                             "live_scheduled_to_first_s": 0.05, "sim_scheduled_to_first_s": 0.03})
    assert "| team | lru | 200 | 100 | 10 | 50 | 150 | 50 | 20 | 30 | 10.0 | 8.0 | 6.0 |" in text
    # slow tokens, medians over the runs: the client's 20 (2.0 s in them, 20 ms a call of 100) against vLLM's 2
    assert f["live_token_stalls"]["client_stalls"] == 20 and "live_token_stalls" not in out["policies"]["pbkv-ta"]
    out["settings"]["calls"] = 100
    assert "| team | lru | 500 | 20 | 2 | 2.0 | 20 |" in fid.markdown({"team": out})


def test_an_order_the_live_runs_separate_must_hold_in_the_simulator():
    docs = [{"results": {"a": live(0.50 + d, 0.1), "b": live(0.60 + d, 0.1)}} for d in (0.0, 0.01)]
    out = compare(docs, {"results": {"a": sim(0.7), "b": sim(0.6)}}, ["a", "b"], "fcfs")
    assert order_agrees(out["policies"]) == ["a vs b"]
    out["settings"] = {"command": "c"}
    assert "Where the time goes" not in fid.markdown({"x": out})


def test_resimulate_reuses_the_live_runs_and_runs_only_the_simulator(tmp_path):
    """`--resimulate`: the live runs stored in --work-dir are read, never re-run (no engine here),
    the simulator replays run0's calls on the given preset, and the JSON names where the live
    runs came from."""
    import json

    from test_calibrate import _doc, _trace
    work = tmp_path / "work"
    (work / "run0").mkdir(parents=True)
    _trace(work / "run0" / "replayed-engine.jsonl")
    for i, h in enumerate((0.40, 0.42)):
        (work / f"live{i}.json").write_text(json.dumps(
            {"calls": 12, "config": {"concurrency": None}, "results": {"lru": live(h, 0.1)}}))
    preset = tmp_path / "preset.json"
    preset.write_text(json.dumps(_doc()))
    out = tmp_path / "fid.json"
    assert fid.main(["--workload", "team", "--runs", "2", "--policies", "lru", "--vllm-blocks", "65",
                     "--preset-file", str(preset), "--work-dir", str(work), "--resimulate",
                     "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    f = doc["policies"]["lru"]
    assert f["runs"] == 2 and f["live_hit"] == pytest.approx(0.41) and 0.0 <= f["sim_hit"] <= 1.0
    assert doc["settings"]["live_runs_from"] == str(work) and (work / "sim-preset.json").is_file()
    with pytest.raises(SystemExit, match="live2.json is missing"):
        fid.main(["--workload", "team", "--runs", "3", "--policies", "lru", "--preset-file", str(preset),
                  "--work-dir", str(work), "--resimulate", "--json", str(out)])
    with pytest.raises(SystemExit):
        fid.main(["--workload", "team", "--resimulate", "--json", str(out)])   # no work dir, no preset


def test_a_second_calibration_brackets_the_simulator_figures():
    docs = [{"results": {"lru": live(0.5, 0.2)}}]
    before = compare(docs, {"results": {"lru": sim(0.50)}}, ["lru"], "fcfs")
    slower = dict(sim(0.52), ttft_mean_s=0.15)
    after = compare(docs, {"results": {"lru": slower}}, ["lru"], "fcfs")
    f = bracket(before, after)["policies"]["lru"]
    assert f["sim_ttft_mean_s_before"] == 0.05 and f["sim_ttft_mean_s_after"] == 0.15
    assert f["sim_ttft_mean_s"] == pytest.approx(0.10) and f["ttft_mean_s_ratio"] == pytest.approx(0.5)
    assert f["sim_hit"] == pytest.approx(0.51) and f["live_hit"] == 0.5
    assert before["policies"]["lru"]["sim_ttft_mean_s"] == 0.05          # the inputs are left as they were
    assert bracket(before, {"policies": {}})["policies"]["lru"] == before["policies"]["lru"]

"""`agentrt.simulate`: the simulator from Python, the same numbers as `agentrt bench`."""

from __future__ import annotations

import subprocess
import sys

import pytest

import agentrt
from agentrt.errors import AgentrtError

SMALL = dict(workflows=8, concurrency=4, gpu_blocks=800)


@pytest.fixture(scope="module")
def res():
    return agentrt.simulate("coding", ["lru", "pbkv-lae", "belady"], **SMALL)


def test_import_agentrt_stays_light():
    code = "import sys, agentrt; print([m for m in ('torch', 'agentrt.api', 'agentrt.bench') if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stderr
    assert "simulate" in dir(agentrt) and agentrt.SimResult.__name__ == "SimResult"


def test_result_matches_bench(res):
    from agentrt.bench.runner import BenchOptions, run_bench
    from agentrt.bench.source import workload_source
    from agentrt.workloads.base import GenConfig
    src = workload_source("coding", GenConfig(workflows=8, seed=0, concurrency=4))
    doc = run_bench(src, ["lru", "pbkv-lae", "belady"], BenchOptions(gpu_blocks=800))
    src.close()
    assert res.policies == ["lru", "pbkv-lae", "belady"]
    for p in res.policies:
        assert res[p]["hit_rate"] == doc["results"][p]["hit_rate"]
    assert res.config["gpu_blocks"] == 800 and res.config["concurrency"] == 4


def test_records_and_frame(res, monkeypatch):
    recs = res.records()
    assert [r["policy"] for r in recs] == res.policies
    assert recs[2]["bound"] and recs[2]["offline"] and recs[2]["ttft_mean_s"] is None
    assert not recs[0]["bound"] and 0.0 <= recs[0]["hit_rate"] <= 1.0
    monkeypatch.setitem(sys.modules, "pandas", None)       # pandas not installed
    with pytest.warns(RuntimeWarning, match="pandas is not installed"):
        assert res.to_frame() == recs


def test_frame_with_pandas(res):
    pd = pytest.importorskip("pandas")
    df = res.to_frame()
    assert isinstance(df, pd.DataFrame) and list(df.index) == res.policies
    assert df.loc["belady", "hit_rate"] == res["belady"]["hit_rate"]


def test_table_repr_json_and_plot(res, tmp_path):
    assert "pbkv-lae" in res.table() and "belady (offline bound)" in res.table()
    assert repr(res).startswith("SimResult(workload:coding")
    import json
    assert json.loads(res.to_json(tmp_path / "r.json").read_text()) == res.doc
    assert res.plot(tmp_path / "r.png").stat().st_size > 0


def test_trace_file_and_sweep(tmp_path, res):
    from agentrt.trace.writer import write_trace
    from agentrt.workloads.base import GenConfig
    from agentrt.workloads.registry import get_workload
    cfg = GenConfig(workflows=8, seed=0, concurrency=4)
    wl = get_workload("coding")
    path = tmp_path / "coding.jsonl"
    write_trace(path, wl.header(cfg), wl.generate(cfg))
    a = agentrt.simulate(str(path), "lru,belady", gpu_blocks=800)
    assert a["lru"]["hit_rate"] == res["lru"]["hit_rate"]
    b = agentrt.simulate(path, ["lru", "belady"], gpu_blocks=1600)
    rows = agentrt.compare([a, b])
    assert [r["gpu_blocks"] for r in rows] == [800, 1600] and set(rows[0]) == {"gpu_blocks", "lru", "belady"}


@pytest.mark.parametrize("kwargs,msg", [
    (dict(trace_or_workload="nope"), "neither a trace file nor a workload"),
    (dict(trace_or_workload="coding", policies=["lru", "nope"]), "unknown policy 'nope'"),
    (dict(trace_or_workload="coding", policies=[]), "no policies"),
    (dict(trace_or_workload="coding", gpu_blocks=0), "gpu_blocks"),
    (dict(trace_or_workload="coding", policy_options={"ttl": {}}), "not among the policies"),
    (dict(trace_or_workload="coding", scheduler="nope"), "unknown scheduler"),
    (dict(trace_or_workload="coding", replicas=0), "replicas must be an integer from 1 to 1,024"),
    (dict(trace_or_workload="coding", cache_at="never"), "cache_at must be one of prefill, schedule, got 'never'"),
    (dict(trace_or_workload="coding", replicas=2, router="nope"), "unknown router 'nope'"),
])
def test_bad_arguments_fail_before_any_replay(kwargs, msg):
    with pytest.raises(AgentrtError, match=msg):
        agentrt.simulate(**{"workflows": 2, **kwargs})


@pytest.mark.slow
def test_the_example_in_docs_api_md_runs(capsys):
    import re
    from pathlib import Path
    pytest.importorskip("pandas")
    text = (Path(__file__).resolve().parents[1] / "docs" / "api.md").read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    exec(compile(code, "docs/api.md", "exec"), {})
    out = capsys.readouterr().out
    assert out.startswith("SimResult(workload:mix (workflows=60, seed=0): 643 calls;") and "gpu_blocks" in out


def test_replicas_behind_a_router_with_the_cluster_oracle():
    res = agentrt.simulate("mtbench", ["lru", "oracle"], workflows=12, concurrency=4, gpu_blocks=300,
                           replicas=2, router="prefix")
    assert res.config["replicas"] == 2 and res.config["router"] == "prefix"
    assert res.config["oracle_reference"] == "lru"
    assert res["lru"]["n_replicas"] == 2 and res["oracle"]["bound"] is True
    assert res["oracle"]["hit_rate"] >= res["lru"]["hit_rate"]


@pytest.mark.parametrize("kw,msg", [
    (dict(workflows="5"), "workflows must be an integer"),
    (dict(workflows=5.5), "workflows must be an integer"),
    (dict(seed=None), "seed must be an integer"),
    (dict(gpu_blocks=1000.7), "gpu_blocks must be an integer"),
    (dict(gpu_blocks=True), "gpu_blocks must be an integer"),
    (dict(time_scale="2"), "time_scale must be a number"),
    (dict(policy_options=["x"]), "policy_options must be a dict"),
    (dict(policy_options={"lru": 3}), "map each policy name to a dict"),
])
def test_simulate_refuses_wrong_types_naming_the_argument(kw, msg):
    with pytest.raises(AgentrtError, match=msg):
        agentrt.simulate("mix", "lru", **{"workflows": 5, **kw})


def test_bad_policies_metric_and_output_suffix_are_agentrt_errors(tmp_path):
    with pytest.raises(AgentrtError, match="policies must be"):
        agentrt.simulate("mix", None, workflows=5)
    r = agentrt.simulate("mix", "lru", workflows=5, gpu_blocks=2000)
    with pytest.raises(AgentrtError, match="no result has metric 'nope'"):
        agentrt.compare([r], "nope")
    with pytest.raises(AgentrtError, match="must end in .json"):
        r.to_json(tmp_path / "x.txt")
    with pytest.raises(AgentrtError, match="must end in .csv"):
        r.to_csv(tmp_path / "x.json")


def test_numpy_numbers_are_accepted_and_written_as_plain_numbers(tmp_path):
    np = pytest.importorskip("numpy")
    r = agentrt.simulate("mix", "lru", workflows=np.int64(4), gpu_blocks=np.int64(2000),
                         time_scale=np.float64(1.0))
    assert r.config["gpu_blocks"] == 2000 and type(r.config["gpu_blocks"]) is int
    r.to_json(tmp_path / "r.json")

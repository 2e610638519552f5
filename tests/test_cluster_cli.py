"""`agentrt bench --replicas N --router NAME` and `agentrt routers` through the real command line:
the run, its JSON (against docs/results-schema.json), and its errors (one line, exit 2)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agentrt.cluster.registry import router_names

REPO = Path(__file__).resolve().parents[1]
SCHEMA = json.loads((REPO / "docs" / "results-schema.json").read_text())


def agentrt(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agentrt.cli", *args], capture_output=True,
                          text=True, timeout=300)


def test_routers_lists_every_name_one_per_line():
    p = agentrt("routers")
    assert p.returncode == 0, p.stderr
    assert [line.split()[0] for line in p.stdout.splitlines()] == router_names()


def test_bench_with_replicas_runs_and_writes_a_valid_document(tmp_path):
    out = tmp_path / "r.json"
    p = agentrt("bench", "--workload", "team", "--workflows", "24", "--concurrency", "8",
                "--gpu-blocks", "800", "--replicas", "3", "--router", "session",
                "--policies", "lru,pbkv-lae", "--quiet", "--json", str(out))
    assert p.returncode == 0, p.stderr
    assert "3 replicas behind the session router" in p.stdout
    assert "imbalance" in p.stdout
    doc = json.loads(out.read_text())
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.Draft202012Validator(SCHEMA).validate(doc)
    assert doc["config"]["replicas"] == 3 and doc["config"]["router"] == "session"
    for r in doc["results"].values():
        assert r["n_replicas"] == 3 and r["router"] == "session" and r["imbalance"] >= 1.0
        assert sum(x["calls_routed"] for x in r["replicas"]) >= r["calls"]
        assert 0.0 <= r["hit_rate"] <= 1.0


def test_one_replica_is_the_plain_bench(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    common = ["bench", "--workload", "mtbench", "--workflows", "12", "--concurrency", "4",
              "--gpu-blocks", "400", "--policies", "lru", "--quiet"]
    assert agentrt(*common, "--json", str(a)).returncode == 0
    assert agentrt(*common, "--replicas", "1", "--json", str(b)).returncode == 0
    ra, rb = (json.loads(x.read_text())["results"]["lru"] for x in (a, b))
    assert ra["hit_rate"] == rb["hit_rate"] and ra["ttft_mean_s"] == rb["ttft_mean_s"]


@pytest.mark.parametrize("args, says", [
    (["--replicas", "0"], "--replicas must be an integer from 1 to 1,024"),
    (["--replicas", "100000"], "--replicas must be an integer from 1 to 1,024, got 100000"),
    (["--replicas", "2", "--router", "nope"], "unknown router 'nope'"),
    (["--replicas", "2", "--engine", "vllm"], "for the simulator"),
    (["--replicas", "2", "--router-set", "nope=1"], "router 'agent' has no option 'nope'; it has: max_workflows"),
    (["--replicas", "2", "--router-set", "spread"], "expected OPTION=VALUE"),
    (["--router-set", "spread=true"], "--router-set and --set router.OPTION need --replicas 2 or more"),
    (["--set", "router.spread=true"], "--router-set and --set router.OPTION need --replicas 2 or more"),
    (["--replicas", "2", "--router", "prefix", "--router-set", "imbalance_rel=0.5"],
     "bad option for router 'prefix': imbalance_abs must be >= 0 and imbalance_rel >= 1"),
])
def test_cluster_errors_are_one_line(args, says):
    p = agentrt("bench", *args)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2, p.stderr
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], p.stderr


def test_router_options_reach_the_router_and_the_document(tmp_path, monkeypatch):
    """--router-set configures the router each run builds, and the document records it."""
    import agentrt.cluster.run as cluster_run
    from agentrt.bench.cli_spec import bench_spec
    built = []
    real = cluster_run.make_router

    def spy(name, **options):
        built.append((name, options))
        return real(name, **options)
    monkeypatch.setattr(cluster_run, "make_router", spy)
    spec = bench_spec(trace=None, workload="team", policies="lru", engine="sim", gpu_blocks=800, host_blocks=0,
                      preset="llama3.1-8b-h100", seed=0, workflows=12, concurrency=4, tool_scale=1.0,
                      time_scale=1.0, json_path=None, csv_path=None, plot=None, train=None,
                      train_fraction=None, predictor=None, predictor_kind="graphsage", predictor_noise=0.0,
                      set_=[], scheduler="fcfs", max_wait=None, max_hold=None, tenant_weights=None,
                      replicas=2, router=None, router_set=["one_call_prefix=false", "copy_cost=3"])
    doc = spec.run()
    assert built == [("agent", {"seed": 0, "one_call_prefix": False, "copy_cost": 3})]
    assert doc["config"]["router_options"] == {"one_call_prefix": False, "copy_cost": 3}


@pytest.mark.slow
def test_default_policies_on_replicas_keep_the_cluster_oracle_and_the_pooled_bounds(tmp_path):
    out = tmp_path / "d.json"
    p = agentrt("bench", "--replicas", "2", "--workflows", "12", "--concurrency", "4", "--quiet",
                "--json", str(out))
    assert p.returncode == 0, p.stderr
    from agentrt.defaults import RUN_POLICIES
    from agentrt.policies.registry import BOUNDS
    doc = json.loads(out.read_text())
    names = list(doc["results"])
    assert names == [n for n in RUN_POLICIES]
    assert doc["results"]["oracle"]["bound"] is True and doc["config"]["oracle_passes"] >= 1
    online = {k: r for k, r in doc["results"].items() if k not in BOUNDS}
    best = max((r["hit_rate"], -i, k) for i, (k, r) in enumerate(online.items()))
    assert doc["config"]["oracle_reference"] == best[2]
    assert doc["results"]["oracle"]["hit_rate"] >= best[0]
    # belady pools the replicas' memory over the LRU run's stream: above every run, below infinite
    assert doc["config"]["bounds_stream"] == "lru"
    res = doc["results"]
    assert res["belady"]["offline"] and res["belady"]["ttft_p99_s"] is None
    assert res["lru"]["hit_rate"] <= res["belady"]["hit_rate"] <= res["infinite"]["hit_rate"]
    held = agentrt("bench", "--replicas", "2", "--workflows", "12", "--concurrency", "4", "--quiet",
                   "--policies", "lru,belady-held,belady", "--json", str(tmp_path / "h.json"))
    assert held.returncode == 0, held.stderr
    got = json.loads((tmp_path / "h.json").read_text())["results"]
    assert got["lru"]["hit_rate"] <= got["belady-held"]["hit_rate"] <= got["belady"]["hit_rate"]
    shown = agentrt("bench", "--replicas", "2", "--workflows", "12", "--concurrency", "4",
                    "--policies", "lru,belady", "--json", str(tmp_path / "t.json")).stdout
    assert "offline bounds pool the replicas' memory" in " ".join(shown.split())


def test_pooled_bounds_alone_run_lru_hidden(tmp_path):
    out = tmp_path / "b.json"
    p = agentrt("bench", "--replicas", "2", "--workflows", "12", "--concurrency", "4", "--quiet",
                "--policies", "belady,infinite", "--transfer-gbps", "25", "--json", str(out))
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    assert list(doc["results"]) == ["belady", "infinite"]
    assert doc["lru_reference"]["hit_rate"] <= doc["results"]["belady"]["hit_rate"]

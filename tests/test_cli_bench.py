"""End-to-end through the `agentrt` command line."""

import json
import subprocess
import sys

import pytest

from conftest import MOONCAKE_CONV, needs_shared

REQUIRED = {"hit_rate", "host_hit_rate", "prefill_tokens", "ttft_mean_s", "ttft_p99_s",
            "e2e_mean_s", "e2e_p99_s", "throughput_tok_s"}


def agentrt(*args, check=True, timeout=600):
    p = subprocess.run([sys.executable, "-m", "agentrt.cli", *args], capture_output=True, text=True,
                       timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"agentrt {' '.join(args)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p


@pytest.mark.slow
def test_default_bench_runs_every_family_beside_the_bounds(tmp_path):
    """`agentrt bench` with no arguments: the default regime, every policy family, the oracle and
    the offline bounds, a plot written where it says."""
    p = subprocess.run([sys.executable, "-m", "agentrt.cli", "bench", "--quiet"], capture_output=True,
                       text=True, timeout=600, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    png = tmp_path / "agentrt-bench.png"
    assert "plot written to agentrt-bench.png" in p.stderr
    assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b"\x89PNG"
    for name in ("lru", "cachesage", "kvflow", "pbkv-lae", "pbkv-ta", "oracle (bound)", "belady (offline",
                 "gap closed (vs oracle)"):
        assert name in p.stdout, name


@pytest.mark.slow
def test_bench_json_has_every_field_and_bounds_in_order(tmp_path):
    out = tmp_path / "r.json"
    png = tmp_path / "r.png"
    agentrt("bench", "--workload", "mtbench", "--workflows", "40", "--concurrency", "8", "--gpu-blocks", "600",
            "--policies", "lru,oracle,belady,infinite", "--quiet", "--json", str(out), "--plot", str(png))
    doc = json.loads(out.read_text())
    assert set(doc) >= {"trace", "calls", "workflows", "config", "results"}
    assert list(doc["results"]) == ["lru", "oracle", "belady", "infinite"]
    for r in doc["results"].values():
        assert REQUIRED <= set(r)
    res = doc["results"]
    assert res["lru"]["hit_rate"] < res["belady"]["hit_rate"] - 0.02
    assert res["lru"]["hit_rate"] <= res["oracle"]["hit_rate"] + 1e-9
    assert res["belady"]["hit_rate"] <= res["infinite"]["hit_rate"]
    assert res["oracle"]["ttft_mean_s"] is not None and res["belady"]["ttft_mean_s"] is None
    assert doc["config"]["oracle_passes"] >= 1
    assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b"\x89PNG"


def test_unknown_policy_is_one_line_listing_valid_names():
    p = agentrt("bench", "--policies", "lru,nope", check=False)
    assert p.returncode != 0
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "unknown policy 'nope'" in lines[0] and "lru" in lines[0]
    assert "Traceback" not in p.stderr


def test_unknown_preset_is_one_line():
    p = agentrt("bench", "--preset", "tpu", check=False)
    assert p.returncode != 0 and "unknown preset 'tpu'" in p.stderr and "llama3.1-8b-h100" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


def test_malformed_trace_stops_with_file_line_field(tmp_path):
    t = tmp_path / "bad.jsonl"
    t.write_text('{"timestamp": 0, "input_length": 1024, "output_length": 1, "hash_ids": [1, 2]}\n'
                 '{"timestamp": 1, "input_length": 1024, "output_length": 1, "hash_ids": [1]}\n')
    p = agentrt("bench", "--trace", str(t), "--quiet", check=False)
    assert p.returncode != 0
    assert f"{t}:2: field 'hash_ids'" in p.stderr
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_bench_on_a_trace_file_with_host_tier(tmp_path):
    t = tmp_path / "t.jsonl"
    lines = [{"trace": "workflow-trace/1", "block_size": 16}]
    for w in range(20):
        lines.append({"workflow": f"w{w}", "agent": "a", "timestamp": w * 100, "input_length": 160,
                      "output_length": 8, "hash_ids": [1, 2, 3, 4, 5, 6, 7, 8, 9, 100 + w]})
        lines.append({"workflow": f"w{w}", "agent": "b", "think_ms": 50, "input_length": 64,
                      "output_length": 8, "hash_ids": [50, 51, 52, 200 + w], "last": True})
    t.write_text("".join(json.dumps(x) + "\n" for x in lines))
    out = tmp_path / "r.json"
    agentrt("bench", "--trace", str(t), "--gpu-blocks", "12", "--host-blocks", "40", "--quiet",
            "--json", str(out), "--policies", "lru,belady,infinite")
    doc = json.loads(out.read_text())
    assert doc["calls"] == 40 and doc["workflows"] == 20
    assert doc["config"]["gpu_blocks"] == 12 and doc["config"]["host_blocks"] == 40
    assert doc["results"]["lru"]["host_hit_rate"] > 0


def test_list_commands():
    assert "lru" in agentrt("policies").stdout
    assert "qwen3-32b-h200" in agentrt("presets").stdout


@needs_shared
@pytest.mark.slow
def test_mooncake_conversation_trace_replays_end_to_end(tmp_path):
    out = tmp_path / "m.json"
    agentrt("bench", "--trace", str(MOONCAKE_CONV), "--policies", "lru,belady,infinite", "--quiet", "--json",
            str(out))
    doc = json.loads(out.read_text())
    assert doc["calls"] == 12031 and doc["workflows"] == 12031
    res = doc["results"]
    assert 0 < res["lru"]["hit_rate"] <= res["belady"]["hit_rate"] <= res["infinite"]["hit_rate"]
    assert res["lru"]["ttft_mean_s"] > 0


def test_ci_runs_the_readme_test_command():
    """`.ci/run` must run exactly the test command the README gives a new user: it reads the
    README's set-up lines (tests/test_ci_readme.py checks the reading and the running)."""
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    readme = (root / "README.md").read_text()
    ci = (root / ".ci" / "run").read_text()
    cmd = next(line.strip() for line in readme.splitlines() if "pytest" in line and "pip install" in line)
    assert "readme_commands.py test" in ci and "readme_commands.py main" in ci
    assert "<!-- setup:test" in readme.split(cmd)[0].rsplit("\n\n    ", 1)[0][-200:]

"""What `agentrt bench` tells the reader about a run whose figures need a caveat: calls too large
for the GPU pool, bounds that count only the GPU tier, a time scale a closed loop does not use,
offline learners with nothing to learn from, and training on the scored trace."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from agentrt.bench.report import oversize_text


def bench(*args: str) -> subprocess.CompletedProcess:
    p = subprocess.run([sys.executable, "-m", "agentrt.cli", "bench", "--quiet", *args],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return p


def flat(text: str) -> str:
    return " ".join(text.split())


def test_calls_larger_than_the_pool_are_flagged(tmp_path):
    p = bench("--workload", "mix", "--workflows", "12", "--gpu-blocks", "300", "--policies", "lru",
              "--json", str(tmp_path / "r.json"))
    doc = json.loads((tmp_path / "r.json").read_text())
    n = doc["results"]["lru"]["oversize_calls"]
    assert n > 0 and f"{n:,} of" in p.stdout and "optimistic" in flat(p.stdout)
    assert oversize_text({"config": {"gpu_blocks": 10}, "results": {"lru": {"oversize_calls": 0, "calls": 5}}}) is None


def test_host_tier_bounds_are_labelled_gpu_only():
    p = bench("--workload", "mtbench", "--workflows", "8", "--concurrency", "4", "--gpu-blocks", "300",
              "--host-blocks", "300", "--policies", "lru,oracle")
    assert "bounds are the GPU tier's" in flat(p.stdout)
    p = bench("--workload", "mtbench", "--workflows", "8", "--concurrency", "4", "--gpu-blocks", "300",
              "--policies", "lru,oracle")
    assert "GPU tier's" not in flat(p.stdout) and "oracle is clairvoyant" in flat(p.stdout)
    assert "belady" not in p.stdout.split("└")[-1]          # no note on a bound that did not run


def test_time_scale_in_a_closed_loop_is_a_warning():
    p = bench("--workload", "mtbench", "--workflows", "8", "--concurrency", "4", "--gpu-blocks", "300",
              "--policies", "lru", "--time-scale", "10")
    assert "warning: --time-scale 10" in p.stderr and "closed loop" in p.stderr
    assert "time-scale" not in bench("--workload", "mtbench", "--workflows", "8", "--concurrency", "4",
                                     "--gpu-blocks", "300", "--policies", "lru").stderr


@pytest.mark.slow
@pytest.mark.parametrize("extra", [["--train-fraction", "0"], ["--workflows", "3"]])
def test_offline_learners_with_nothing_held_back_are_named(tmp_path, extra):
    args = ["--workload", "mtbench", "--workflows", "8", "--concurrency", "4", "--gpu-blocks", "300",
            "--policies", "lru,pbkv-he", *extra, "--json", str(tmp_path / "r.json")]
    if extra[0] == "--workflows":
        args = args[:2] + args[4:]
    p = bench(*args)
    assert "pbkv-he run untrained" in p.stderr
    assert "none held back: pbkv-he run untrained" in flat(p.stdout)
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["config"]["train"] == {"source": None, "workflows": 0, "untrained": ["pbkv-he"]}
    jsonschema = pytest.importorskip("jsonschema")
    from test_output_schema import SCHEMA
    jsonschema.Draft202012Validator(SCHEMA).validate(doc)


@pytest.mark.slow
def test_training_on_the_scored_trace_is_a_warning(tmp_path):
    trace = tmp_path / "t.jsonl"
    subprocess.run([sys.executable, "-m", "agentrt.cli", "generate", "mtbench", "--workflows", "8",
                    "--concurrency", "4", "-o", str(trace)], check=True, capture_output=True)
    p = bench("--trace", str(trace), "--train", str(trace), "--policies", "lru,pbkv-he", "--gpu-blocks", "300")
    assert "is the trace being scored" in p.stderr


@pytest.mark.slow
def test_a_predictor_that_knows_none_of_the_agents_is_a_warning(tmp_path):
    def gen(name):
        out = tmp_path / f"{name}.jsonl"
        subprocess.run([sys.executable, "-m", "agentrt.cli", "generate", name, "--workflows", "12",
                        "--concurrency", "4", "-o", str(out)], check=True, capture_output=True)
        return out
    swe, he = gen("swebench"), gen("humaneval")
    model = tmp_path / "swe.pt"
    subprocess.run([sys.executable, "-m", "agentrt.cli", "train", "--trace", str(swe), "-o", str(model)],
                   check=True, capture_output=True, timeout=300)
    p = bench("--trace", str(he), "--predictor", str(model), "--policies", "lru,pbkv-he", "--gpu-blocks", "300")
    assert "knows none of the agents" in p.stderr and "coder, locator, planner, tester" in p.stderr
    p = bench("--trace", str(swe), "--predictor", str(model), "--policies", "lru,pbkv-he", "--gpu-blocks", "300")
    assert "knows none" not in p.stderr


def test_a_run_where_every_policy_ties_says_why():
    p = bench("--workload", "team", "--workflows", "12", "--policies", "lru,pbkv-lae")
    assert "every policy ties: at 25,720 GPU blocks" in flat(p.stdout)
    assert "--gpu-blocks" in flat(p.stdout)
    q = bench("--workload", "team", "--workflows", "24", "--gpu-blocks", "400", "--policies", "lru,pbkv-lae")
    assert "every policy ties" not in flat(q.stdout)


def test_fair_on_one_tenant_says_so():
    p = bench("--workload", "team", "--workflows", "8", "--gpu-blocks", "600", "--policies", "lru",
              "--scheduler", "fair")
    assert "one tenant: the fair scheduler" in flat(p.stdout)

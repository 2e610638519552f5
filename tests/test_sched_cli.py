"""`agentrt schedulers` and the scheduler options of `agentrt bench`, through the command line."""

import json
import subprocess
import sys

from agentrt.sched.registry import scheduler_names


def agentrt(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "agentrt.cli", *args], capture_output=True, text=True,
                          timeout=300, cwd=cwd)


def test_schedulers_lists_every_name_one_per_line():
    p = agentrt("schedulers")
    assert p.returncode == 0, p.stderr
    lines = [ln for ln in p.stdout.splitlines() if ln.strip()]
    assert [ln.split()[0] for ln in lines] == scheduler_names()
    assert all(len(ln.split(None, 1)) == 2 for ln in lines)        # each with its description


def test_bench_records_the_scheduler_and_its_options(tmp_path):
    out = tmp_path / "r.json"
    p = agentrt("bench", "--workload", "mtbench", "--workflows", "10", "--scheduler", "agent", "--max-wait", "5",
                "--policies", "lru", "--quiet", "--json", str(out))
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    assert doc["config"]["scheduler"] == "agent"
    assert doc["config"]["scheduler_options"] == {"max_wait_s": 5.0}
    r = doc["results"]["lru"]
    assert r["calls"] > 0
    for k in ("wait_max_s", "wait_p99_s", "ttft_p50_s", "e2e_p50_s"):
        assert k in r and r[k] >= 0
    assert "scheduler agent" in p.stdout


def test_bench_with_fair_weights_runs(tmp_path):
    out = tmp_path / "r.json"
    p = agentrt("bench", "--workload", "mtbench", "--workflows", "10", "--scheduler", "fair",
                "--tenant-weights", "default:2,other:1", "--policies", "lru", "--quiet", "--json", str(out))
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    assert doc["config"]["scheduler"] == "fair"
    assert doc["config"]["scheduler_options"]["weights"] == "default:2,other:1"


def one_line_error(p, *needles):
    assert p.returncode != 0
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    for n in needles:
        assert n in lines[0], lines[0]


def test_unknown_scheduler_fails_before_any_replay():
    p = agentrt("bench", "--workload", "mtbench", "--workflows", "10", "--scheduler", "nope", "--quiet")
    one_line_error(p, "unknown scheduler 'nope'", "agent", "fcfs", "lpm")


def test_tenant_weights_need_the_fair_scheduler():
    p = agentrt("bench", "--workload", "mtbench", "--workflows", "10", "--tenant-weights", "a:2", "--quiet")
    one_line_error(p, "--tenant-weights", "fair")
    p = agentrt("bench", "--workload", "mtbench", "--workflows", "10", "--scheduler", "agent",
                "--tenant-weights", "a:2", "--quiet")
    one_line_error(p, "--tenant-weights", "fair")


def test_shared_chunk_tokens_needs_fair_and_a_count():
    p = agentrt("bench", "--workload", "mtbench", "--workflows", "10", "--shared-chunk-tokens", "512", "--quiet")
    one_line_error(p, "--shared-chunk-tokens", "fair")
    p = agentrt("bench", "--workload", "mtbench", "--workflows", "10", "--scheduler", "fair",
                "--shared-chunk-tokens", "-5", "--quiet")
    one_line_error(p, "--shared-chunk-tokens", ">= 0")


def test_bench_with_a_shared_chunk_cap_records_it(tmp_path):
    out = tmp_path / "r.json"
    p = agentrt("bench", "--workload", "mtbench", "--workflows", "10", "--scheduler", "fair",
                "--shared-chunk-tokens", "0", "--policies", "lru", "--quiet", "--json", str(out))
    assert p.returncode == 0, p.stderr
    assert json.loads(out.read_text())["config"]["scheduler_options"]["shared_chunk_tokens"] == 0


def test_no_prefix_hold_is_for_the_agent_scheduler_and_recorded(tmp_path):
    p = agentrt("bench", "--workload", "mtbench", "--workflows", "10", "--scheduler", "lpm",
                "--no-prefix-hold", "--quiet")
    one_line_error(p, "--no-prefix-hold", "agent")
    out = tmp_path / "r.json"
    p = agentrt("bench", "--workload", "mtbench", "--workflows", "10", "--scheduler", "agent",
                "--no-prefix-hold", "--policies", "lru", "--quiet", "--json", str(out))
    assert p.returncode == 0, p.stderr
    assert json.loads(out.read_text())["config"]["scheduler_options"]["prefix_hold"] is False


def test_bad_max_wait_and_bad_weights_are_one_line_errors():
    p = agentrt("bench", "--workload", "mtbench", "--workflows", "10", "--scheduler", "las", "--max-wait", "-1",
                "--quiet")
    one_line_error(p, "--max-wait", "> 0")
    p = agentrt("bench", "--workload", "mtbench", "--workflows", "10", "--scheduler", "fair",
                "--tenant-weights", "a:0", "--quiet")
    one_line_error(p, "fair", "weight")
    p = agentrt("bench", "--workload", "mtbench", "--workflows", "10", "--scheduler", "fair",
                "--tenant-weights", "a2", "--quiet")
    one_line_error(p, "TENANT:WEIGHT")

"""benchmarks/lru_regret.py --timeline: per window of calls in LRU's order, the blocks a policy
misses beyond LRU with and without the safety net, on a real generated trace."""

from __future__ import annotations

import pytest

from bench_scripts import load_script

lr = load_script("lru_regret")


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    from agentrt.cli import app
    from typer.testing import CliRunner
    path = tmp_path_factory.mktemp("regret") / "mtbench.jsonl"
    res = CliRunner().invoke(app, ["generate", "mtbench", "--workflows", "24", "--seed", "0",
                                   "--concurrency", "8", "-o", str(path)])
    assert res.exit_code == 0, res.output
    return path


def test_lru_against_itself_loses_nothing_and_never_falls_back(trace):
    rows = lr.timeline(trace, 120, "lru", 10)
    assert rows and all(r["extra_no_net"] == r["extra_net"] == 0 and r["fallback_share"] == 0 for r in rows)
    assert sum(r["lru_miss"] for r in rows) > 0


def test_windows_cover_every_call_once_and_the_running_sum_adds_up(trace):
    rows = lr.timeline(trace, 120, "pbkv-he", 7)
    total = 0
    for r in rows:
        total += r["extra_net"]
        assert r["extra_net_sum"] == total and 0.0 <= r["fallback_share"] <= 1.0
        assert -r["lru_miss"] <= r["extra_no_net"] <= r["blocks"] - r["lru_miss"]
    first, last = rows[0]["calls"].split("-"), rows[-1]["calls"].split("-")
    assert first[0] == "0" and int(last[1]) + 1 == 7 * (len(rows) - 1) + (int(last[1]) - int(last[0]) + 1)
    text = lr.render_timeline(rows, "pbkv-he")
    assert text.count("\n") == len(rows) + 1 and "pbkv-he extra, no net" in text

"""benchmarks/cache_at.py: one application through both variants when blocks are shared as they
are scheduled, paired with prefix_hold.py's runs, and the summary counts what it says it counts."""

from __future__ import annotations

import pytest

from bench_scripts import load_script


def res(hits: dict, e2e: float = 10.0) -> dict:
    return {p: {"hit_rate": h, "e2e_mean_s": e2e} for p, h in hits.items()}


def rows_for(seed: int, f: float, prefill: tuple, schedule: tuple) -> tuple[dict, dict]:
    """(a run at schedule time, prefix_hold's run of the same trace and memory)."""
    fcfs_p, agent_p = prefill
    fcfs_s, agent_s = schedule
    r = {"seed": seed, "capacity_factor": f, "gpu_blocks": 100,
         "results": {"fcfs": res(fcfs_s, 8.0), "agent": res(agent_s)}}
    p = {"seed": seed, "capacity_factor": f, "gpu_blocks": 100,
         "results": {"fcfs": res(fcfs_p), "agent": res(agent_p)}}
    return r, p


def test_table_and_summary():
    mod = load_script("cache_at")
    fan = next(s for s in range(1, 30) if mod.draw_app(s).delegator >= 0)
    flat = next(s for s in range(1, 30) if mod.draw_app(s).delegator < 0)
    pairs = [rows_for(fan, 1.0, ({"lru": 0.30, "oracle": 0.37}, {"lru": 0.51, "pbkv-ta": 0.53}),
                      ({"lru": 0.45, "pbkv-ta": 0.47, "oracle": 0.50, "infinite": 0.71},
                       {"lru": 0.49, "pbkv-ta": 0.52, "oracle": 0.55})),
             rows_for(flat, 1.0, ({"lru": 0.60, "oracle": 0.62}, {"lru": 0.60, "pbkv-ta": 0.61}),
                      ({"lru": 0.61, "pbkv-ta": 0.60, "oracle": 0.80, "infinite": 0.90},
                       {"lru": 0.61, "pbkv-ta": 0.78, "oracle": 0.80}))]
    rows = [r for r, _ in pairs]
    text = mod.table(mod.paired(rows, [p for _, p in pairs]))
    assert (f"| {fan} | " in text and "| 30.0 / 37.0 | 51.0 / 53.0 | 45.0 / 47.0 / 50.0 | 49.0 / 52.0 / 55.0 "
            "| 71.0 | 10.0 / 8.0 |") in text
    assert "on the 1 applications with a fan-out +15.0 to +15.0 (median +15.0)" in text
    assert "on the 1 without +1.0 to +1.0" in text
    assert "fan-outs +6.0 to +6.0" in text                  # 51 (hold) - 45 (when scheduled)
    assert "FCFS + oracle +13.0 to +18.0 (median +15.5) points" in text
    assert "after the prefill over when scheduled: 1.25x to 1.25x" in text
    # under FCFS: 47/50 = 0.94x and 60/80 = 0.75x; in scope (oracle >= 1.3x lru) only the flat one
    assert "under FCFS 0.75x to 0.94x (median 0.84x); where the oracle is at least 1.3x LRU (1 runs) " \
           "0.95x in 0; pbkv-ta minus lru -1.0 to +2.0" in text
    # under agent: 52/55 = 0.945 and 78/80 = 0.975, the flat one in scope and reaching 0.95x
    assert "under the agent scheduler 0.95x to 0.97x (median 0.96x); where the oracle is at least 1.3x " \
           "LRU (1 runs) 0.95x in 1" in text

def test_runs_are_paired_with_the_same_memory():
    mod = load_script("cache_at")
    r, p = rows_for(1, 0.5, ({"lru": 0.3, "oracle": 0.4}, {"lru": 0.3, "pbkv-ta": 0.3}),
                    ({"lru": 0.3, "pbkv-ta": 0.3, "oracle": 0.4, "infinite": 0.5},
                     {"lru": 0.3, "pbkv-ta": 0.3, "oracle": 0.4}))
    p["gpu_blocks"] = 99
    with pytest.raises(SystemExit, match="no run of application 1 at f = 0.5 with 100 blocks"):
        mod.paired([r], [p])


@pytest.mark.slow
def test_one_application_runs_both_variants(monkeypatch, tmp_path):
    mod = load_script("cache_at")
    hold = load_script("prefix_hold")
    monkeypatch.setattr(hold, "WORKFLOWS", 10)
    monkeypatch.setattr(hold, "CAPACITY", [1.0])
    rows = hold.run_app(1, tmp_path, mod.VARIANTS)   # what cache_at.py's sweep runs per application
    assert len(rows) == 1 and set(rows[0]["results"]) == set(mod.VARIANTS)
    assert all("--cache-at schedule" in c for c in rows[0]["commands"].values())
    assert set(rows[0]["results"]["agent"]) == {"lru", "pbkv-ta", "oracle"}

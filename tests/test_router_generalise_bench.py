"""benchmarks/router_generalise.py: the table and its counts say what they claim; one real run."""

from __future__ import annotations

from bench_scripts import load_script


def fig(hit: float, p99: float = 1.0, imb: float = 1.0, busy: tuple[float, ...] = ()) -> dict:
    out = {"hit_rate": hit, "ttft_p99_s": p99, "imbalance": imb}
    if busy:
        out.update(makespan_s=100.0, replicas=[{"busy_s": b} for b in busy])
    return out


def test_table_counts_the_targets():
    mod = load_script("router_generalise")
    base = {"round-robin": fig(0.1), "least-loaded": fig(0.1), "session": fig(0.2)}
    runs = [{"seed": 1, "replicas": 4, "ceiling_hit_rate": 0.5,
             "routers": {**base, "prefix": fig(0.20, 2.0, 1.1),
                         "agent": fig(0.26, 1.5, 1.3, (10, 20, 30))}},   # 1.3x, p99 ok, imbalanced, idle
            {"seed": 2, "replicas": 8, "ceiling_hit_rate": 0.6,
             "routers": {**base, "prefix": fig(0.40, 1.0, 1.0),
                         "agent": fig(0.36, 1.2, 1.1, (60, 70, 80))}}]   # 0.9x, p99 worse, busy
    text = mod.markdown({"runs": runs})
    assert "| 1.30 | 2.00 / 1.50 | 1.10 / 1.30 | 20 / 30 |" in text
    assert "median 1.10 (0.90-1.30), at least 1.3x in 1; agent's TTFT p99 no worse than prefix's in 1; " \
           "agent's imbalance <= 1.2 in 1. Highest hit rate: prefix 1, agent 1." in text
    assert ("Where agent's imbalance is above 1.2 (1 runs) its replicas are busy 20-20% of the run on "
            "average, the busiest at most 30%, and its TTFT p99 is no worse than prefix's in 1; where "
            "they are busy at least 50% on average (1 runs), its imbalance is <= 1.2 in 1.") in text
    runs[1]["routers"]["agent"] = fig(0.36, 1.2, 1.1)      # an old row without busy times: no cell
    assert "| 0.90 | 1.00 / 1.20 | 1.00 / 1.10 | - |" in mod.markdown({"runs": runs})


def test_one_application_runs_every_router(monkeypatch):
    mod = load_script("router_generalise")
    monkeypatch.setattr(mod, "PER", 4)
    r = mod.run_app(3, 2)
    assert r["seed"] == 3 and r["replicas"] == 2 and set(r["routers"]) == set(mod.ROUTERS)
    assert all(0.0 <= x["hit_rate"] <= 1.0 and x["calls"] == r["calls"] for x in r["routers"].values())
    assert 0.0 < r["ceiling_hit_rate"] <= 1.0

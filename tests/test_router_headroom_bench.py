"""benchmarks/router_headroom.py: one real line's bounds sit above its runs; the table says what
the figures say."""

from __future__ import annotations

from bench_scripts import load_script


def test_one_line_bounds_every_router_run(monkeypatch):
    mod = load_script("router_headroom")
    monkeypatch.setitem(mod.WORKFLOWS, "team", 8)
    line = mod.run_line("team", 2, ["prefix", "agent"])
    assert set(line["routers"]) == {"prefix", "agent"}
    for r in line["routers"].values():
        assert 0.0 < r["hit_rate"] <= r["placement_bound"] <= r["held_bound"] <= r["min_bound"] <= 1.0
    assert line["bound"] == max(r["held_bound"] for r in line["routers"].values())


def test_table_states_the_bound_against_prefix_and_the_target():
    mod = load_script("router_headroom")

    def fig(hit, placed, held, plain):
        return {"hit_rate": hit, "placement_bound": placed, "held_bound": held, "min_bound": plain}
    runs = [{"workload": "gaia", "replicas": 4, "ceiling_hit_rate": 0.8, "bound": 0.44,
             "routers": {"prefix": fig(0.30, 0.36, 0.44, 0.62), "agent": fig(0.27, 0.33, 0.43, 0.61)}},
            {"workload": "team", "replicas": 8, "ceiling_hit_rate": 0.77, "bound": 0.77,
             "routers": {"prefix": fig(0.67, 0.7, 0.77, 0.77), "agent": fig(0.66, 0.7, 0.77, 0.77)}},
            {"workload": "mooncake", "replicas": 4, "ceiling_hit_rate": 0.23, "bound": 0.21,
             "routers": {"prefix": fig(0.06, 0.1, 0.21, 0.23), "agent": fig(0.06, 0.1, 0.21, 0.23)}}]
    text = mod.markdown({"settings": {"command": "python -m benchmarks.router_headroom"}, "seconds": 3,
                         "runs": runs})
    rows = text.splitlines()[-3:]
    assert rows[0] == "| gaia | 4 | 80.0 | 30.0 | 36.0 | 44.0 | 27.0 | 33.0 | 43.0 | 62.0 | 1.20 | 1.47 | yes | 0.63 |"
    assert rows[1] == "| team | 8 | 77.0 | 67.0 | 70.0 | 77.0 | 66.0 | 70.0 | 77.0 | 77.0 | 1.04 | 1.15 | no | 0.86 |"
    assert rows[2].endswith("| 3.50 | - | 0.29 |")        # no multi-agent target on one-call traces

"""benchmarks/oracle_bound.py: one real workload orders its figures as bounds must; the table."""

from __future__ import annotations

from bench_scripts import load_script


def test_one_workload_keeps_the_bounds_in_order(monkeypatch):
    mod = load_script("oracle_bound")
    monkeypatch.setattr(mod, "WORKFLOWS", 24)
    monkeypatch.setattr(mod, "GPU_BLOCKS", 600)
    r = mod.run("mtbench")
    assert r["lru"] <= r["belady-held"] <= r["belady"]
    assert r["oracle"] <= r["belady"]


def test_table_states_the_gap_in_points():
    mod = load_script("oracle_bound")
    doc = {"command": "python -m benchmarks.oracle_bound", "seconds": 9,
           "runs": [{"workload": "gaia", "lru": 0.2, "pbkv-ta": 0.25, "oracle": 0.3, "belady-held": 0.32,
                     "belady": 0.5}]}
    assert mod.markdown(doc).splitlines()[-1] == "| gaia | 20.0 | 25.0 | 30.0 | 32.0 | 50.0 | 2.0 | 0.78 |"

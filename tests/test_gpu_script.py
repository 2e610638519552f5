"""benchmarks/gpu/run.py, the prepared GPU checks: its dry run passes on this machine (CI)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_gpu_script_dry_run(tmp_path):
    p = subprocess.run([sys.executable, "-m", "benchmarks.gpu.run", "--dry-run", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=600, cwd=REPO)
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    rep = json.loads((tmp_path / "gpu_check.json").read_text())
    assert rep["dry_run"] and rep["env"]["torch"]
    assert rep["host_tier"]["round_trip_exact"] == [True, True]
    assert rep["model"]["status"] == "ok" and rep["model"]["weights"] == "dummy"
    cfg = json.loads((Path(rep["model"]["dir"]) / "config.json").read_text())
    assert (cfg["num_hidden_layers"], cfg["hidden_size"], cfg["num_key_value_heads"]) == (32, 4096, 8)
    for step in ("calibrate", "fidelity", "live_admission"):
        assert rep[step]["status"] in ("checked", "missing"), (step, rep[step])

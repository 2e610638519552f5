"""The prepared GPU checks: `python -m benchmarks.gpu.run` from the repository root (see run.py)."""

"""A script of benchmarks/ as a module, for the tests of its tables and helpers.

The repository root is on the tests' path (pyproject.toml's `pythonpath`), so each script is the
package module `benchmarks.NAME`, as `python -m benchmarks.NAME` runs it.
"""

from __future__ import annotations

import importlib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"


def load_script(name: str):
    """The module `benchmarks.NAME`, shared by the tests: patch its names with `monkeypatch`, which
    undoes them after each test."""
    return importlib.import_module(f"benchmarks.{name}")

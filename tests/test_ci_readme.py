"""`.ci/run` runs the README's set-up lines as written: the extraction, and the script itself on a
stand-in README in a scratch copy (never on this checkout: it deletes .venv)."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("readme_commands", ROOT / ".ci" / "readme_commands.py")
rc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rc)


def test_readme_set_up_lines():
    lines = rc.setup_lines((ROOT / "README.md").read_text())
    assert set(lines) == {"main", "test"}
    assert lines["main"].startswith('python3 -m venv .venv && . .venv/bin/activate && pip install -e ".[gnn]" ')
    assert lines["main"].endswith("agentrt bench")
    test = lines["test"]
    assert 'pip install -e ".[test,serve,vllm,frameworks,ray,gnn]"' in test and test.endswith("&& pytest -n 2 --dist loadgroup")
    assert "uninstall" not in test, "the set-up needs no manual step (cpu-stubs/ does that job)"


@pytest.mark.parametrize("text,error", [
    ("nothing here\n", "no <!-- setup:main -->"),
    ("<!-- setup:main -->\n\n    a\n    b\n", "found 2 lines"),
    ("<!-- setup:main -->\n\nplain text\n", "found 0 lines"),
    ("<!-- setup:main -->\n    a\n<!-- setup:main -->\n    b\n", "more than once"),
])
def test_bad_readmes_are_refused(text, error):
    with pytest.raises(rc.ReadmeError, match=error):
        rc.setup_line(text, "main")


def test_marker_with_a_note_and_tabs():
    text = "intro\n<!-- setup:main (runs in CI) -->\n\n\n\techo hi && echo there  \n\nmore\n"
    assert rc.setup_line(text, "main") == "echo hi && echo there"


def test_ci_run_executes_both_lines_in_order(tmp_path):
    (tmp_path / ".ci").mkdir()
    for f in ("run", "readme_commands.py"):
        shutil.copy(ROOT / ".ci" / f, tmp_path / ".ci" / f)
    (tmp_path / ".venv").mkdir()
    (tmp_path / "README.md").write_text(
        "# x\n\n<!-- setup:main -->\n\n    echo main \"$(ls -d .venv 2>/dev/null)\" >> ran.txt\n\n"
        "text\n\n<!-- setup:test -->\n\n    echo test >> ran.txt && true\n")
    out = subprocess.run(["bash", str(tmp_path / ".ci" / "run")], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "ran.txt").read_text() == "main \ntest\n"   # .venv was removed first
    assert "+ echo test >> ran.txt && true" in out.stdout
    # a failing line fails the run
    (tmp_path / "README.md").write_text("<!-- setup:main -->\n    false\n<!-- setup:test -->\n    true\n")
    assert subprocess.run(["bash", str(tmp_path / ".ci" / "run")], capture_output=True).returncode != 0

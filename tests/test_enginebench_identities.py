"""`agentrt bench --engine vllm` refuses, before vLLM starts, a trace whose tenant or ids the
vLLM connector would drop (it would replay them as tenant `default` or without their workflow,
and the per-tenant results would look valid); names file, line and field."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from agentrt.wire.identity import refused_by_connector


@pytest.mark.parametrize("line,field", [
    ({"tenant": "team a"}, "tenant"),
    ({"tenant": "t" * 65}, "tenant"),
    ({"agent": "a" * 600}, "agent"),
    ({"workflow": "w" * 600}, "workflow"),
])
def test_cli_refuses_what_the_connector_would_drop(tmp_path, line, field):
    path = tmp_path / "t.jsonl"
    ok = {"workflow": "w0", "call": 0, "agent": "a", "tenant": "team-a", "timestamp": 0,
          "input_length": 1024, "output_length": 4, "hash_ids": [1, 2], "last": True}
    bad = {**ok, "workflow": "w1", "hash_ids": [3, 4], **line}
    path.write_text(json.dumps(ok) + "\n" + json.dumps(bad) + "\n")
    p = subprocess.run([sys.executable, "-m", "agentrt.cli", "bench", "--engine", "vllm", "--trace", str(path),
                        "--policies", "lru", "--train-fraction", "0"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert lines[-1].startswith(f"error: {path}:2: field '{field}'"), p.stderr
    assert "Traceback" not in p.stderr


def test_what_the_connector_accepts_passes():
    assert refused_by_connector("\x1fline-3", None, "default") is None     # a Mooncake line's id
    assert refused_by_connector("w", "planner", "team-b") is None
    assert refused_by_connector("w", "a\x01", "t")[0] == "agent"

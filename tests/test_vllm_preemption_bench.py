"""benchmarks/vllm_preemption.py: its table (the live runs themselves need a vLLM server and
minutes; `tests/test_vllm_preemption.py` runs the connector's preemption path live)."""

from __future__ import annotations

from bench_scripts import load_script


def _doc() -> dict:
    run = {"preemptions": 4.0, "resumed": 4, "hit_tokens": 640, "blocks_mirrored_at_preemption": 40,
           "seconds": 1.0}
    none = {"preemptions": 0.0, "resumed": 0, "hit_tokens": 0, "blocks_mirrored_at_preemption": 0,
            "seconds": 1.0}
    return {"burst": 6, "prompt": 600, "output": 400, "blocks": 96, "rounds": 3, "long": [1500, 600],
            "stream": [16, 16, 300, 300],
            "runs": {"this checkout": {"burst": {"lru": run}, "stream": {"lru": none}}}}


def test_table_rows_and_the_share_of_the_best_case():
    mod = load_script("vllm_preemption")
    text = mod.table(_doc())
    rows = [line for line in text.splitlines() if line.startswith("| this checkout")]
    assert len(rows) == 2
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    # 640 hit tokens over 4 resumes; 40 blocks still cached (10 a preemption); 640 / (40 x 32)
    assert cells[3:] == ["4", "4", "640", "160", "40", "10.0", "0.50"]
    cells = [c.strip() for c in rows[1].strip("|").split("|")]
    assert cells[3:] == ["0", "0", "0", "-", "0", "-", "-"]      # nothing to divide by
    assert "1500 + 600 tokens" in text and "priority scheduling" in text

"""Measured presets: the fit (`enginebench/calibrate.py`), preset files (`engine/preset_file.py`),
the simulator on them (`bench --preset-file`, arrival delay), and a live calibration."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from agentrt.engine.costs import CostModel
from agentrt.engine.preset_file import FORMAT, describe, load_preset_file, parse_preset
from agentrt.enginebench.calibrate import fit
from agentrt.errors import AgentrtError
from vllm_support import requires_vllm

TRUE = {"overhead_s": 0.004, "per_token_s": 5e-5, "per_pair_s": 3e-8, "per_kv_token_s": 1e-6}


def _iteration(tokens, pairs, kv):
    return (TRUE["overhead_s"] + TRUE["per_token_s"] * tokens + TRUE["per_pair_s"] * pairs
            + TRUE["per_kv_token_s"] * kv)


def _doc(**over) -> dict:
    d = {"format": FORMAT, "name": "test-engine", "command": "test",
         "engine": {"kind": "vllm", "version": "0.32.0", "device": "cpu", "block_size": 32, "num_blocks": 65,
                    "kv_tokens": 2048, "max_num_batched_tokens": 512, "max_num_seqs": 8, "cache_at": "schedule",
                    "model": {"name": "m", "params": 5e6, "layers": 4, "hidden": 256, "heads": 4,
                              "kv_heads": 4, "head_dim": 64, "dtype_bytes": 4}},
         "costs": dict(TRUE), "request_overhead_s": 0.01}
    d.update(over)
    return d


def test_fit_recovers_the_terms_of_exact_points():
    pre = [[n, c, 0.012 + _iteration(n, n * (c + (n + 1) / 2), c + n)]
           for n in (1, 64, 512, 2048) for c in (0, 1024, 4096)]
    dec = [[b, b * ctx, _iteration(b, b * ctx, b * ctx)] for b in (1, 8, 32) for ctx in (128, 2048)]
    res = fit(pre, dec)
    for k, v in TRUE.items():
        assert res["costs"][k] == pytest.approx(v, rel=1e-3), k
    assert res["request_overhead_s"] == pytest.approx(0.012, rel=1e-3)
    assert res["fit"]["prefill_mape"] < 1e-6 and res["fit"]["decode_mape"] < 1e-6


def test_a_preset_file_drives_the_cost_model_and_pool(tmp_path):
    pf = parse_preset(_doc(), "f.json")
    c = CostModel(pf.preset)
    assert c.prefill(100, 1000) == pytest.approx(_iteration(100, 100 * 1050.5, 1100))
    assert c.decode(4, 4000) == pytest.approx(_iteration(4, 4000, 4000))
    assert pf.preset.kv_capacity_tokens() == 2048 and pf.preset.gpu_blocks(16) == 128
    assert (pf.max_batch_tokens, pf.max_running, pf.cache_at, pf.request_overhead_s) == (512, 8, "schedule", 0.01)
    rows = dict(describe(pf))
    assert "512 tokens per step" in rows["scheduler"] and "2,048 tokens" in rows["KV pool"]


@pytest.mark.parametrize("change,field", [
    (lambda d: d.update(format="other/1"), "format"),
    (lambda d: d["costs"].pop("per_pair_s"), "costs.per_pair_s"),
    (lambda d: d["costs"].update(per_token_s=-1), "costs.per_token_s"),
    (lambda d: d["costs"].update(overhead_s=float("nan")), "costs.overhead_s"),
    (lambda d: d["engine"].update(kv_tokens=10.5), "engine.kv_tokens"),
    (lambda d: d["engine"].update(cache_at="never"), "engine.cache_at"),
    (lambda d: d["engine"]["model"].update(layers="4"), "engine.model.layers"),
])
def test_bad_preset_files_name_the_field(change, field):
    d = _doc()
    change(d)
    with pytest.raises(AgentrtError, match=f"f.json: field '{field}'"):
        parse_preset(d, "f.json")


def test_preset_file_errors_on_disk(tmp_path):
    with pytest.raises(AgentrtError, match="no such file"):
        load_preset_file(tmp_path / "none.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(AgentrtError, match="not a JSON preset file"):
        load_preset_file(bad)


def _trace(path):
    lines = [{"trace": "workflow-trace/1", "block_size": 32}]
    for w in range(6):
        lines.append({"workflow": f"w{w}", "timestamp": 0, "input_length": 320, "output_length": 16,
                      "hash_ids": list(range(9)) + [100 + w], "last": False})
        lines.append({"workflow": f"w{w}", "input_length": 352, "output_length": 8,
                      "hash_ids": list(range(9)) + [100 + w, 200 + w], "last": True})
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return path


def _bench(*args):
    return subprocess.run([sys.executable, "-m", "agentrt.cli", "bench", *args], capture_output=True,
                          text=True, timeout=300)


def test_bench_on_a_preset_file_and_its_arrival_delay(tmp_path):
    trace = _trace(tmp_path / "t.jsonl")
    runs = {}
    for delay in (0.0, 0.5):
        f = tmp_path / f"p{delay}.json"
        f.write_text(json.dumps(_doc(request_overhead_s=delay)))
        out = tmp_path / f"r{delay}.json"
        p = _bench("--trace", str(trace), "--preset-file", str(f), "--policies", "lru", "--quiet",
                   "--json", str(out))
        assert p.returncode == 0, p.stderr
        runs[delay] = json.loads(out.read_text())
    doc = runs[0.0]
    cfg = doc["config"]
    assert cfg["preset"] == "test-engine" and cfg["gpu_blocks"] == 64 and cfg["cache_at"] == "schedule"
    assert cfg["max_batch_tokens"] == 512 and cfg["measured_preset"]["costs"]["per_token_s"] == TRUE["per_token_s"]
    a, b = doc["results"]["lru"], runs[0.5]["results"]["lru"]
    assert b["ttft_mean_s"] == pytest.approx(a["ttft_mean_s"] + 0.5, abs=0.05)   # every call waits its path
    assert b["hit_rate"] == a["hit_rate"]
    p = _bench("--trace", str(trace), "--preset-file", str(tmp_path / "p0.0.json"), "--preset", "qwen3-14b-h100")
    assert p.returncode == 2 and "either --preset or --preset-file" in p.stderr
    p = _bench("--trace", str(trace), "--preset-file", str(tmp_path / "missing.json"))
    assert p.returncode == 2 and "no such file" in p.stderr


@requires_vllm
@pytest.mark.slow
def test_calibrate_a_live_vllm(tmp_path):
    out = tmp_path / "preset.json"
    p = subprocess.run([sys.executable, "-m", "agentrt.cli", "calibrate", "--engine", "vllm", "--vllm-blocks", "64",
                        "--repeats", "1", "-o", str(out)], capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    pf = load_preset_file(out)
    assert pf.preset.kv_capacity_tokens() == 63 * 32 and pf.max_batch_tokens > 0 and pf.max_running > 0
    fitted = pf.preset.fitted
    assert fitted.per_token_s > 0 or fitted.per_pair_s > 0     # prefill cost grows with the prompt
    assert pf.doc["fit"]["prefill_points"] and pf.doc["fit"]["decode_points"]
    shown = subprocess.run([sys.executable, "-m", "agentrt.cli", "presets", "--file", str(out)],
                           capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0 and "tokens per step" in shown.stdout

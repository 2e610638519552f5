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
    # short requests were answered while decode batches streamed: the path's growth is fitted
    assert pf.doc["fit"]["stream_points"] and pf.request_overhead_per_stream_s >= 0
    assert all(t > 0 for _, _, t, *_ in pf.doc["fit"]["stream_points"])
    # a decode batch was timed alone and beside short calls: the host's cost per call
    assert pf.doc["fit"]["host_points"] and pf.host_per_call_s >= 0
    shown = subprocess.run([sys.executable, "-m", "agentrt.cli", "presets", "--file", str(out)],
                           capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0 and "tokens per step" in shown.stdout


def test_fit_recovers_the_prefill_context_term_and_the_stream_path():
    per_ctx, base, per_stream = 2.5e-6, 0.006, 0.0015

    def it(tokens, pairs, kv, ctx=0.0):
        return _iteration(tokens, pairs, kv) + per_ctx * ctx
    pre = [[n, c, base + it(n, n * (c + (n + 1) / 2), c + n, c)]
           for n in (1, 32, 512, 2048) for c in (0, 1024, 4096) if not (n == 1 and c)]
    dec = [[b, b * ctx, it(b, b * ctx, b * ctx)] for b in (1, 8, 32) for ctx in (128, 2048)]
    from agentrt.enginebench.calibrate import PROBE_TOKENS
    n = PROBE_TOKENS
    streams = [[b, b * 544.0, base + per_stream * b + 0.5 * it(b, b * 544.0, b * 544.0)
                + it(b + n, b * 544.0 + n * (n + 1) / 2, b * 544.0 + n)] for b in (1, 4, 16, 32)]
    res = fit(pre, dec, streams)
    assert res["costs"]["per_prefill_context_token_s"] == pytest.approx(per_ctx, rel=1e-3)
    assert res["request_overhead_s"] == pytest.approx(base, rel=1e-3)
    assert res["request_overhead_per_stream_s"] == pytest.approx(per_stream, rel=1e-3)
    assert res["fit"]["stream_mae_s"] < 1e-9 and len(res["fit"]["stream_points"]) == 4
    # the cost model reads the term; a file without it (fitted before it) reads as 0
    doc = _doc(costs={**TRUE, "per_prefill_context_token_s": per_ctx}, request_overhead_per_stream_s=per_stream)
    pf = parse_preset(doc, "f.json")
    assert CostModel(pf.preset).prefill(32, 4096) == pytest.approx(it(32, 32 * (4096 + 16.5), 4128, 4096))
    assert pf.request_overhead_per_stream_s == per_stream and "per call in flight" in dict(describe(pf))["request overhead"]
    assert parse_preset(_doc(), "f.json").preset.fitted.per_prefill_context_token_s == 0.0
    with pytest.raises(AgentrtError, match="costs.per_prefill_context_token_s"):
        parse_preset(_doc(costs={**TRUE, "per_prefill_context_token_s": -1.0}), "f.json")


def test_calibrate_refit_fits_a_presets_stored_points_again(tmp_path):
    pre = [[n, c, 0.006 + _iteration(n, n * (c + (n + 1) / 2), c + n)] for n in (1, 64, 512) for c in (0, 2048)
           if not (n == 1 and c)]
    dec = [[b, b * 512.0, _iteration(b, b * 512.0, b * 512.0)] for b in (1, 8, 32)]
    src = tmp_path / "old.json"
    src.write_text(json.dumps(_doc(costs={k: 2 * v for k, v in TRUE.items()},
                                   fit={"prefill_points": [[*p, 0.0] for p in pre],
                                        "decode_points": [[*p, 0.0] for p in dec]})))
    out = tmp_path / "new.json"
    p = subprocess.run([sys.executable, "-m", "agentrt.cli", "calibrate", "--refit", str(src), "-o", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    new = json.loads(out.read_text())
    assert new["costs"]["per_token_s"] == pytest.approx(TRUE["per_token_s"], rel=1e-3)
    assert new["refit_command"].startswith("agentrt calibrate --refit") and new["engine"] == _doc()["engine"]
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(_doc()))
    p = subprocess.run([sys.executable, "-m", "agentrt.cli", "calibrate", "--refit", str(bare), "-o", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "stores no measured points" in p.stderr


def test_each_call_in_flight_lengthens_a_new_calls_path(tmp_path):
    """`request_overhead_per_stream_s`: six workflows issue at once, so the k-th call read waits
    the idle path plus k x the per-stream term (`replay.DelayedArrivals`)."""
    trace = _trace(tmp_path / "t.jsonl")
    runs = {}
    for per in (0.0, 0.1):
        f = tmp_path / f"p{per}.json"
        f.write_text(json.dumps(_doc(request_overhead_s=0.01, request_overhead_per_stream_s=per)))
        out = tmp_path / f"r{per}.json"
        p = _bench("--trace", str(trace), "--preset-file", str(f), "--policies", "lru", "--quiet", "--json", str(out))
        assert p.returncode == 0, p.stderr
        runs[per] = json.loads(out.read_text())
    a, b = runs[0.0]["results"]["lru"], runs[0.1]["results"]["lru"]
    # first calls: 0..5 in flight -> mean extra 0.25 s; the later calls see fewer in flight
    assert b["ttft_mean_s"] > a["ttft_mean_s"] + 0.1
    assert runs[0.1]["config"]["measured_preset"]["request_overhead_per_stream_s"] == 0.1


def test_host_cost_is_the_progress_a_short_call_costs_less_its_own_step():
    from agentrt.enginebench.host_cost import host_per_call, lost_per_call
    # two decoding calls, a token every 10 ms; window B (1 s) gave each 80 tokens beside 10 calls:
    # 200 ms lost, 20 ms per call
    times = [[0.01 * i for i in range(1, 301)] for _ in range(2)]
    beside = [[1.0 + 0.0125 * i for i in range(1, 81)] for _ in range(2)]
    lost = lost_per_call([a[:100] + b for a, b in zip(times, beside)], (0.0, 1.0), (1.0, 2.0), 10)
    assert lost == pytest.approx(0.020)
    assert lost_per_call([[0.5], [0.6]], (0.0, 1.0), (1.0, 2.0), 10) is None      # too few tokens to time
    host, rows = host_per_call([[2, 100.0, 0.004], [4, 200.0, 0.006], [8, 400.0, 0.009]], lambda b, ctx: 0.002)
    assert host == pytest.approx(0.004) and [r[4] for r in rows] == pytest.approx([0.002, 0.004, 0.007])
    assert host_per_call([[2, 100.0, 0.001]], lambda b, ctx: 0.002)[0] == 0.0     # never below 0
    assert host_per_call([], lambda b, ctx: 0.0) == (0.0, [])


def test_fit_and_refit_turn_host_points_into_the_presets_host_cost(tmp_path):
    from agentrt.enginebench.calibrate import PROBE_TOKENS, refit
    pre = [[n, c, 0.006 + _iteration(n, n * (c + (n + 1) / 2), c + n)] for n in (1, 64, 512) for c in (0, 2048)
           if not (n == 1 and c)]
    dec = [[b, b * 512.0, _iteration(b, b * 512.0, b * 512.0)] for b in (1, 8, 32)]
    n = PROBE_TOKENS

    def own(b, ctx):       # what a short call's prefill adds to a step of the batch
        return _iteration(b + n, ctx + n * (n + 1) / 2, ctx + n) - _iteration(b, ctx, ctx)
    hosts = [[b, b * 900.0, 0.003 + own(b, b * 900.0)] for b in (2, 4, 8)]
    res = fit(pre, dec, None, hosts)
    assert res["host_per_call_s"] == pytest.approx(0.003, rel=1e-3)
    assert [round(r[4], 6) for r in res["fit"]["host_points"]] == [0.003] * 3
    doc = {**_doc(), **res}
    again = refit(doc, "agentrt calibrate --refit x")
    assert again["host_per_call_s"] == pytest.approx(0.003, rel=1e-3)
    pf = parse_preset(doc, "f.json")
    assert pf.host_per_call_s == pytest.approx(0.003, rel=1e-3)
    assert "ms of host CPU per call" in dict(describe(pf))["host cost"]
    assert parse_preset(_doc(), "f.json").host_per_call_s == 0.0       # files measured before it
    with pytest.raises(AgentrtError, match="host_per_call_s"):
        parse_preset(_doc(host_per_call_s=-0.001), "f.json")


def test_the_engine_waits_for_the_hosts_handling_of_each_call(tmp_path):
    """`host_per_call_s` (a host the engine shares): the six calls that arrive together each hold
    the engine for their request path (`request_overhead_s`, the API server's intake) before its
    first step, and every later step waits for half the host cost of each call that finished;
    the engine's own compute (`busy_s`) does not change. Without a host cost the request path is
    only a delay."""
    from agentrt.bench.runner import BenchOptions, run_policy
    from agentrt.bench.source import file_source
    trace = _trace(tmp_path / "t.jsonl")
    sims = {}
    for host in (0.0, 0.02):
        f = tmp_path / f"p{host}.json"
        f.write_text(json.dumps(_doc(request_overhead_s=0.005, host_per_call_s=host)))
        opts = BenchOptions(preset_file=str(f), cache_at="schedule")
        src = file_source(trace)
        try:
            sims[host] = run_policy(src, "lru", opts, record_calls=True)
        finally:
            src.close()
    a, b = sims[0.0], sims[0.02]
    assert b.busy_s == pytest.approx(a.busy_s)
    first_a = [c["ttft_s"] for c in a.metrics.call_log if c["call"] == 0]
    first_b = [c["ttft_s"] for c in b.metrics.call_log if c["call"] == 0]
    # the first calls: six arrivals, each one's intake before the engine's first step
    assert first_b == pytest.approx([t + 6 * 0.005 for t in first_a], abs=1e-9)
    assert b.metrics.summary()["e2e_mean_s"] > a.metrics.summary()["e2e_mean_s"] + 0.05
    assert a.metrics.summary()["hit_rate"] == b.metrics.summary()["hit_rate"]

"""`agentrt bench --engine vllm`: prompt rendering, call selection, metrics parsing, and a short live run."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from agentrt.enginebench import prom
from agentrt.enginebench.client import tool_calls
from agentrt.enginebench.render import Renderer
from agentrt.enginebench.runner import cut_calls
from agentrt.trace.schema import Call
from vllm_support import requires_vllm


def _call(wf="w", i=0, hashes=(1, 2, 3), n=48, out=8, tenant="default", **kw) -> Call:
    return Call(workflow=wf, call=i, input_length=n, output_length=out, hash_ids=list(hashes),
                tenant=tenant, **kw)


def test_equal_hash_ids_give_equal_tokens_and_different_ones_differ():
    r = Renderer(vocab=4096, trace_block_size=16, scale=1.0)
    a = r.render(_call(hashes=(1, 2, 3)))
    b = r.render(_call(wf="other", i=5, hashes=(1, 2, 3)))
    c = r.render(_call(hashes=(1, 2, 4)))
    assert a == b and len(a) == 48
    assert a[:32] == c[:32] and a[32:] != c[32:]          # share exactly the shared blocks
    assert r.render(_call(hashes=(9, 2, 3)))[:16] != a[:16]
    assert r.render(_call(hashes=(1, 2, 3), tenant="t2")) != a   # tenants never share
    assert all(16 <= t < 4096 for t in a)
    assert Renderer(vocab=4096, trace_block_size=16, scale=1.0).render(_call()) == a  # deterministic


def test_scaling_partial_blocks_outputs_and_clipping():
    r = Renderer(vocab=4096, trace_block_size=16, scale=0.25)
    assert r.tokens_per_block == 4
    full = r.render(_call(hashes=(1, 2, 3), n=40, out=100))   # 2 full blocks + 8-token tail
    assert len(full) == 2 * 4 + 2 and r.output_tokens(_call(out=100)) == 25
    assert r.render(_call(hashes=(1, 2, 3), n=48))[:8] == full[:8]
    small = Renderer(vocab=4096, trace_block_size=16, scale=1.0, max_model_len=40)
    assert small.output_tokens(_call(out=100)) == 10
    assert len(small.render(_call(n=48, out=100))) == 30 and small.clipped == 1


def test_live_answers_render_where_later_prompts_carry_them():
    """A later prompt that lists an earlier call's output ids sends that call's prompt tail and
    the tokens it generated, at the same positions, so the engine can hit the answer's blocks."""
    r = Renderer(vocab=4096, trace_block_size=16, scale=0.5)        # 8 tokens per trace block
    first = _call(hashes=(1, 2, 3), n=40, out=24, output_hash_ids=[10, 11, 12])   # 2.5 blocks + 24
    p1 = r.render(first)
    assert len(p1) == 20
    answer = list(range(100, 112))                                   # 12 generated tokens
    assert r.record_output(first, p1, answer) == 2     # positions 2 and 3; block 4 needs 8 more
    later = _call(i=1, hashes=(1, 2, 10, 11, 12, 20), n=96, out=4)
    p2 = r.render(later)
    seq = p1 + answer
    assert p2[:32] == seq[:32]                                       # prompt + answer, as sent back
    assert r.output_blocks_live == 2 and r.output_blocks_synthetic == 1   # id 12 was not filled
    # a clipped prompt (positions moved) or live answers off: nothing recorded, stand-ins sent
    assert r.record_output(first, p1[:-1], answer) == 0
    off = Renderer(vocab=4096, trace_block_size=16, scale=0.5, live_outputs=False)
    q1 = off.render(first)
    assert off.record_output(first, q1, answer) == 0
    assert off.render(later)[16:24] != answer[4:12]
    assert off.output_blocks_live == 0 and off.output_blocks_synthetic == 3


def test_cut_calls_keeps_whole_workflows_and_tool_calls():
    calls = [_call("a", 0), _call("a", 1), _call("b", 0), _call("b", 1, think_ms=500, after=(0,)),
             _call("c", 0)]
    assert [c.workflow for c in cut_calls(calls, 3)] == ["a", "a"]
    assert len(cut_calls(calls, None)) == 5
    assert tool_calls(calls) == {("b", 0): 500}


def test_prometheus_counters_summed_over_labels():
    text = """# HELP vllm:prefix_cache_hits_total x
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 10.0
vllm:prefix_cache_hits_total{engine="1",model_name="m"} 5.0
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 40.0
vllm:prefix_cache_queries_created{engine="0"} 1.7e9
"""
    c = prom.parse(text)
    assert c[prom.HITS] == 15.0 and c[prom.QUERIES] == 40.0 and c[prom.EXT_HITS] == 0.0
    assert prom.delta(c, {prom.HITS: 5.0})[prom.HITS] == 10.0


def test_vllms_latency_histograms_give_mean_phases_over_a_run():
    def scrape(q_sum, q_n, ttft_sum, ttft_n):
        return prom.parse(f"""vllm:request_queue_time_seconds_sum{{engine="0"}} {q_sum}
vllm:request_queue_time_seconds_count{{engine="0"}} {q_n}
vllm:request_queue_time_seconds_bucket{{engine="0",le="0.3"}} {q_n}
vllm:time_to_first_token_seconds_sum{{engine="0"}} {ttft_sum}
vllm:time_to_first_token_seconds_count{{engine="0"}} {ttft_n}
""")
    before, after = scrape(1.0, 2, 0.5, 2), scrape(4.0, 8, 2.0, 8)    # the warm-up, then six calls
    ph = prom.phases(prom.delta(after, before))
    assert ph["queue"] == 0.5 and ph["ttft"] == 0.25
    assert ph["prefill"] is None and ph["decode"] is None        # not observed: no mean


def test_summary_reports_tenants_only_when_there_are_several():
    from agentrt.enginebench.client import CallResult, ReplayResult
    from agentrt.enginebench.summary import summarize
    res = ReplayResult(calls=[CallResult("a/1", 0, 100, 80, 4, 0.5, 1.0, tenant="a"),
                              CallResult("b/1", 0, 100, 0, 4, 2.0, 3.0, tenant="b"),
                              CallResult("b/2", 0, 300, 100, 4, 4.0, 5.0, tenant="b"),
                              CallResult("b/3", 0, 50, 0, 0, None, 0.1, error="boom", tenant="b")])
    zero = {prom.HITS: 0.0, prom.QUERIES: 0.0, prom.EXT_HITS: 0.0}
    t = summarize(res, {}, zero, None)["tenants"]
    assert t["a"]["calls"] == 1 and t["a"]["hit_rate"] == 0.8 and t["a"]["ttft_p50_s"] == 0.5
    assert t["b"]["calls"] == 2 and t["b"]["hit_rate"] == 0.25 and t["b"]["ttft_mean_s"] == 3.0
    one = ReplayResult(calls=[CallResult("w", 0, 10, 0, 1, 0.1, 0.2)])
    assert "tenants" not in summarize(one, {}, zero, None)
    # vLLM's preemptions over the run, under the simulator's key
    assert summarize(one, {prom.PREEMPTIONS: 2.0}, {**zero, prom.PREEMPTIONS: 5.0}, None)["preemptions"] == 3


def test_token_stalls_set_the_clients_slow_gaps_against_vllms_histogram():
    from agentrt.enginebench.client import SLOW_GAP_S, CallResult, ReplayResult
    from agentrt.enginebench.summary import summarize
    # one bucket of vLLM's inter-token histogram, read by its bound among other labels
    text = f"""vllm:inter_token_latency_seconds_bucket{{engine="0",le="0.05",model_name="m"}} 5
vllm:inter_token_latency_seconds_bucket{{engine="0",le="{SLOW_GAP_S}",model_name="m"}} 9
vllm:inter_token_latency_seconds_count{{engine="0",model_name="m"}} 12
"""
    after = prom.parse(text)
    assert after[prom.ITL_FAST] == 9.0
    res = ReplayResult(calls=[CallResult("w", 0, 10, 0, 5, 0.1, 1.0, stalls=2, stalled_s=0.5),
                              CallResult("w", 1, 10, 0, 3, 0.1, 0.4),
                              CallResult("w", 2, 10, 0, 0, None, 0.1, error="boom", stalls=7)])
    ts = summarize(res, {}, {prom.QUERIES: 1.0, **after}, None)["token_stalls"]
    # the failed call counts nowhere; 4 + 2 token gaps at the client, 12 at vLLM, 3 of them slow
    assert ts == {"threshold_s": SLOW_GAP_S, "client_stalls": 2, "client_stalled_s": 0.5, "client_gaps": 6,
                  "engine_stalls": 3, "engine_gaps": 12}


def _tiny_trace(path) -> None:
    """Three two-agent workflows, two at a time: each agent's later call extends its thread."""
    lines = [{"trace": "workflow-trace/1", "block_size": 16, "name": "tiny", "concurrency": 2}]
    hid = 1000
    for w in range(3):
        sys_p, sys_c = list(range(1, 17)), list(range(101, 117))    # shared system prompts
        # chained ids: one id always follows the same predecessor (the trace contract)
        own = list(range(hid, hid + 24))
        coder_own = list(range(hid + 50, hid + 58))
        more = list(range(hid + 60, hid + 68))
        hid += 100
        lines.append({"workflow": f"w{w}", "agent": "planner", "timestamp": 0, "input_length": 40 * 16,
                      "output_length": 16, "hash_ids": sys_p + own})
        lines.append({"workflow": f"w{w}", "agent": "coder", "think_ms": 20, "input_length": 24 * 16,
                      "output_length": 16, "hash_ids": sys_c + coder_own})
        lines.append({"workflow": f"w{w}", "agent": "planner", "input_length": 48 * 16,
                      "output_length": 8, "hash_ids": sys_p + own + more,
                      "last": True})
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")


@requires_vllm
@pytest.mark.slow
def test_bench_engine_vllm_short_run(tmp_path, tiny_model):
    trace = tmp_path / "tiny.jsonl"
    _tiny_trace(trace)
    out = tmp_path / "res.json"
    cmd = [sys.executable, "-m", "agentrt.cli", "bench", "--engine", "vllm", "--trace", str(trace),
           "--policies", "lru,pbkv-lae,belady", "--vllm-blocks", "64", "--scale", "0.5",
           "--json", str(out), "--quiet", "--log-dir", str(tmp_path / "logs"), "--tool-hints", "0",
           "--engine-iterations"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "pbkv-lae" in p.stdout and "offline bounds" in p.stderr
    doc = json.loads(out.read_text())
    assert doc["calls"] == 9 and doc["workflows"] == 3
    assert list(doc["results"]) == ["lru", "pbkv-lae"]
    eng = doc["config"]["engine"]
    assert eng["num_gpu_blocks"] == 64 and eng["block_size"] == 32 and eng["tokens_per_trace_block"] == 8
    for name, r in doc["results"].items():
        for key in ("hit_rate", "host_hit_rate", "prefill_tokens", "ttft_mean_s", "ttft_p50_s", "ttft_p90_s",
                    "ttft_p99_s", "e2e_mean_s", "e2e_p50_s", "e2e_p90_s", "e2e_p99_s", "throughput_tok_s"):
            assert r[key] is not None, (name, key)
        assert r["ttft_p50_s"] <= r["ttft_p90_s"] <= r["ttft_p99_s"]
        # the tiny trace's outputs are longer than one token: TPOT is measured, and positive
        assert r["tpot_mean_s"] is not None and r["tpot_mean_s"] > 0 and r["tpot_p50_s"] <= r["tpot_p99_s"]
        assert r["errors"] == 0 and r["calls"] == 9 and r["prompt_tokens"] > 0
        assert 0.0 < r["hit_rate"] < 1.0           # the shared system prompts hit
        assert r["connector"]["policy"] == name and not r["connector"]["failed"]
        # each planner call before the coder's 20 ms tool wait announced it (a kv_hints action)
        assert r["connector"]["hints_actions"] == 3 and r["connector"]["hints_envelopes"] == 3
        # vLLM's own iteration log, parsed: its compute, within the run's span (plus the warm-up's)
        it = r["engine_iterations"]
        assert it["iterations"] > 9 and 0 < it["busy_s"] and 0 < it["busy_share"] < 1.5
        assert it["prefill_iterations"] >= 1 and it["decode_step_ms"]
        assert r["busy_s"] == it["busy_s"]          # under the simulator's key, for fidelity.py
        # vLLM's own latency histograms, as means per call over the run
        ph = r["engine_phases"]
        assert ph["ttft"] > 0 and ph["prefill"] > 0 and ph["queue"] >= 0 and ph["inter_token"] > 0
        assert r["inflight_s"] > 0
        # every output token after a call's first is a gap, at the client and in vLLM's histogram
        ts = r["token_stalls"]
        assert ts["client_gaps"] == r["output_tokens"] - r["calls"] and ts["engine_gaps"] == ts["client_gaps"]
        assert 0 <= ts["client_stalls"] <= ts["client_gaps"] and 0 <= ts["engine_stalls"] <= ts["engine_gaps"]
        # the header's closed loop (two workflows at a time) is the replay's, as in the simulator
        assert r["workflows_in_flight_max"] == 2
    assert doc["config"]["tool_hints"] == 0 and doc["config"]["concurrency"] == 2
    # every server's engine core ran at the lowest priority (local/engine_nice.py), stock's too
    assert set(doc["config"]["engine"]["engine_core_nice"].values()) == {19}


def test_inflight_time_is_the_union_of_the_calls_spans():
    from agentrt.enginebench.client import CallResult
    from agentrt.enginebench.summary import inflight

    def call(sent, lat):
        return CallResult("w", 0, 1, 0, 1, 0.1, lat, sent_at=sent)
    # [0, 2] and [1, 3] overlap, [5, 6] is apart, one call has no send time
    assert inflight([call(1.0, 2.0), call(0.0, 2.0), call(5.0, 1.0), CallResult("w", 1, 1, 0, 1, None, 9.0)]) == 4.0
    assert inflight([]) == 0.0


def test_workflows_in_flight_counts_workflows_not_calls():
    from agentrt.enginebench.client import CallResult
    from agentrt.enginebench.summary import workflows_in_flight_max

    def call(wf, sent, lat):
        return CallResult(wf, 0, 1, 0, 1, 0.1, lat, sent_at=sent)
    # a and b overlap; a's two parallel calls count once; c starts as b ends (not together)
    calls = [call("a", 0.0, 2.0), call("a", 0.5, 1.0), call("b", 1.0, 2.0), call("c", 3.0, 1.0)]
    assert workflows_in_flight_max(calls) == 2
    assert workflows_in_flight_max(calls + [call("d", 1.5, 0.1)]) == 3
    assert workflows_in_flight_max([]) == 0


@requires_vllm
@pytest.mark.slow
def test_bench_engine_vllm_hosted_in_the_scheduler(tmp_path, tiny_model):
    """`--vllm-integration scheduler`: no KV connector configured; the policy, the identity and the
    kv_hints reach the runtime all the same (its event log), and no worker built a connector."""
    from agentrt.vllm.eventlog import read_events
    trace = tmp_path / "tiny.jsonl"
    _tiny_trace(trace)
    out, logs = tmp_path / "res.json", tmp_path / "logs"
    cmd = [sys.executable, "-m", "agentrt.cli", "bench", "--engine", "vllm", "--trace", str(trace),
           "--policies", "pbkv-lae", "--vllm-blocks", "64", "--scale", "0.5", "--json", str(out), "--quiet",
           "--log-dir", str(logs), "--tool-hints", "0", "--vllm-integration", "scheduler"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["config"]["integration"] == "scheduler" and list(doc["results"]) == ["lru", "pbkv-lae"]
    for name, r in doc["results"].items():
        assert r["errors"] == 0 and r["calls"] == 9 and 0.0 < r["hit_rate"] < 1.0
        assert r["connector"]["policy"] == name and not r["connector"]["failed"]
        assert r["connector"]["hints_actions"] == 3
        assert [e["role"] for e in read_events(str(logs / f"connector-{name}.jsonl"), "init")] == ["scheduler"]
        assert "hosted in the scheduler" in (logs / f"vllm-{name}.log").read_text()


@requires_vllm
@pytest.mark.slow
def test_bench_engine_vllm_against_stock_vllm_on_the_same_calls(tmp_path, tiny_model):
    """`--vllm-baseline stock`: vLLM with no agentrt at all runs first on the same calls (no
    connector built, no agentrt counters), then the policy with agentrt as usual."""
    trace = tmp_path / "tiny.jsonl"
    _tiny_trace(trace)
    out, logs = tmp_path / "res.json", tmp_path / "logs"
    cmd = [sys.executable, "-m", "agentrt.cli", "bench", "--engine", "vllm", "--trace", str(trace),
           "--policies", "lru", "--vllm-blocks", "64", "--scale", "0.5", "--json", str(out), "--quiet",
           "--log-dir", str(logs), "--vllm-baseline", "stock"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["config"]["baseline"] == "stock" and list(doc["results"]) == ["stock", "lru"]
    stock, lru = doc["results"]["stock"], doc["results"]["lru"]
    assert stock["errors"] == lru["errors"] == 0 and stock["calls"] == lru["calls"] == 9
    assert stock["prompt_tokens"] == lru["prompt_tokens"]          # the same calls
    assert stock["connector"] is None and lru["connector"]["policy"] == "lru"
    assert "Creating v1 connector" not in (logs / "vllm-stock.log").read_text()
    assert "Creating v1 connector with name: AgentRTConnector" in (logs / "vllm-lru.log").read_text()
    # each run's calls with their send times, joined with the runtime's events (call_path.py)
    from agentrt.enginebench.call_path import join
    assert len((logs / "calls-stock.jsonl").read_text().splitlines()) == 9
    paths = join(logs / "calls-lru.jsonl", logs / "connector-lru.jsonl")
    assert len(paths) == 9
    for p in paths:
        assert p.to_engine_s > 0 and p.queued_s >= 0 and p.to_first_s > 0
        assert p.to_engine_s + p.queued_s + p.to_first_s == pytest.approx(p.ttft_s, abs=1e-6)   # wall clocks: ~1e-7 s


def test_engine_bench_options_check_the_integration():
    from agentrt.enginebench.runner import EngineBenchOptions
    from agentrt.errors import AgentrtError
    assert EngineBenchOptions(integration="scheduler").integration == "scheduler"
    with pytest.raises(AgentrtError, match="--vllm-integration must be one of connector, scheduler"):
        EngineBenchOptions(integration="plugin")
    with pytest.raises(AgentrtError, match="--host-blocks needs --vllm-integration connector"):
        EngineBenchOptions(integration="scheduler", host_blocks=64)
    assert EngineBenchOptions(baseline="stock").baseline == "stock"
    with pytest.raises(AgentrtError, match="--vllm-baseline must be one of lru, stock, none"):
        EngineBenchOptions(baseline="vllm")

"""The connector's end-to-end cost against stock vLLM (`agentrt.enginebench.connector_cost`).

Unit tests of the summaries and the variants, and the short CI version of
`benchmarks/connector_cost.py`: vLLM's own benchmark client replays the start of Mooncake's
conversation trace at a loaded rate against stock vLLM and `lru` as the connector and in vLLM's
scheduler class, one round.
The 3%/5% comparison with stock is the benchmark's, over rotated rounds: on a shared 2-core
machine two consecutive runs of stock alone differ by up to 20% (measured: 3.03 and 2.57 req/s),
so no pair of runs a test can afford tells a few percent apart. What a test can check is
agentrt's own time in vLLM's step (its hooks, timed by the connector), under `HOOK_SHARE` of a
loaded run, a loss to stock no larger than `COARSE_MARGIN` in the same round, and that the
connector keeps stock's CPU binding (test_vllm_plugin.py).
"""

from __future__ import annotations

import json

import pytest

from agentrt.enginebench.connector_cost import (
    Load, engine_delta, label, loss, measure, paired_versus_stock, pool, round_order, stock_reservation,
    summarize, variant, versus_stock,
)
from agentrt.enginebench.vllm_client import summary
from conftest import MOONCAKE_CONV, needs_shared
from vllm_support import requires_vllm

HOOK_SHARE = 0.02
# What one round can tell apart here: single rounds of stock against stock (the benchmark's A/A
# control, docs/results/engine/connector_cost-scheduler-hooks*.json) differed by up to 10% in
# throughput and 17% in TTFT (and 31% in mean TPOT, too noisy to check in one round), and in CI
# the other test worker runs beside it. 40% is above that and below the tax issue 37 found (a
# do-nothing connector under vLLM's own CPU binding: 0.82x throughput, 1.48x TTFT).
COARSE_MARGIN = 0.40


def _run(thr, ttft, tpot, e2e=1.0, dur=10.0, hook=None):
    r = {"request_throughput": thr, "mean_ttft_s": ttft, "mean_tpot_ms": tpot, "mean_e2el_s": e2e,
         "duration": dur}
    if hook is not None:
        r["connector"] = {"hook_s": hook, "steps": 1000, "reorder_s": 0.0, "runtime_s": 0.0,
                          "hook_us_per_step": hook * 1e3}
    return r


def test_summaries_medians_ranges_and_cost_against_stock():
    stock = summarize([_run(2.0, 10, 10), _run(2.2, 12, 11), _run(1.8, 11, 12)])
    assert stock["median"]["request_throughput"] == 2.0
    assert stock["range"]["mean_ttft_s"] == [10, 12]
    conn = summarize([_run(1.5, 15, 12, hook=0.5), _run(1.6, 14, 12, hook=0.3)])
    assert conn["median"]["hook_us_per_step"] == pytest.approx(400.0)
    assert conn["median"]["hook_share_of_run"] == pytest.approx(0.04)
    vs = versus_stock({"stock": stock, "lru": conn})["lru"]
    assert vs["request_throughput"] == pytest.approx(1.55 / 2.0)
    assert loss(vs) == pytest.approx(14.5 / 11 - 1)       # the worst of the three
    assert loss({"request_throughput": 1.01, "mean_ttft_s": 0.99, "mean_tpot_ms": 1.0}) == 0.0


def test_cpu_per_vllm_process_is_summarised_per_role():
    runs = [_run(2.0, 10, 10) | {"cpu_s": {"api_server": a, "engine_core": 5.0, "worker": 9.0}} for a in (1.0, 3.0, 2.0)]
    s = summarize(runs + [_run(2.0, 10, 10)])          # a run without the reading is left out
    assert s["median"]["cpu_api_server_s"] == 2.0 and s["range"]["cpu_api_server_s"] == [1.0, 3.0]
    assert s["median"]["cpu_worker_s"] == 9.0


def test_what_the_engine_did_is_a_delta_between_two_scrapes_and_summarised_apart():
    from agentrt.enginebench.prom import HITS, PREEMPTIONS, PROMPT, QUERIES, WANTED
    before = dict.fromkeys(WANTED, 0.0) | {QUERIES: 1000.0, HITS: 400.0, PROMPT: 1000.0}
    after = before | {QUERIES: 3000.0, HITS: 1400.0, PROMPT: 3000.0, PREEMPTIONS: 2.0}
    d = engine_delta(before, after)
    assert d == {"prefix_hit_rate": 0.5, "prefix_queries": 2000.0, "prompt_tokens": 2000.0, "preemptions": 2.0}
    assert engine_delta(before, before)["prefix_hit_rate"] is None          # nothing asked
    runs = [_run(2.0, 10, 10) | {"engine": d}, _run(2.0, 10, 10) | {"engine": d | {"prefix_hit_rate": 0.3}}]
    s = summarize(runs)
    assert s["median"]["prefix_hit_rate"] == pytest.approx(0.4) and s["range"]["prefix_hit_rate"] == [0.3, 0.5]
    assert "prefix_hit_rate" not in paired_versus_stock({"stock": runs, "lru": runs})["lru"]


def test_a_profile_is_the_share_of_samples_whose_stack_holds_each_kind():
    from agentrt.enginebench.connector_cost import WORKER_KINDS, profile_breakdown
    folded = ("main;worker_busy_loop (vllm/v1/executor/m.py:1);dequeue (vllm/d.py:2) 30\n"
              "main;execute_model (vllm/v1/worker/r.py:3);forward (vllm/model_executor/models/llama.py:4) 60\n"
              "main;execute_model (vllm/v1/worker/r.py:3);wait_for_layer_load "
              "(vllm/distributed/kv_transfer/kv_connector/v1/base.py:5) 10\n"
              # the attention a connector's per-layer wrapper wraps: not the connector's cost
              "main;execute_model (vllm/v1/worker/r.py:3);wrapper (vllm/model_executor/layers/attention/"
              "kv_transfer_utils.py:48);unified_attention (vllm/attention/a.py:6) 20\n"
              "a line that is not a stack\n")
    got = profile_breakdown(folded, WORKER_KINDS)
    assert got["samples"] == 120
    assert got["waiting for the engine core"] == pytest.approx(30 / 120)
    assert got["execute_model"] == pytest.approx(90 / 120) and got["model forward"] == pytest.approx(60 / 120)
    assert got["vLLM connector path"] == pytest.approx(10 / 120) and got["agentrt"] == 0.0


def test_paired_ratios_cancel_drift_between_rounds():
    # round 2 is 20% slower for everyone: medians over rounds blur it, round-by-round ratios do not
    raw = {"stock": [_run(3.0, 6, 10), _run(2.4, 9, 13)], "lru": [_run(2.97, 6.3, 10), _run(2.37, 9.3, 13.3)]}
    vs = paired_versus_stock(raw)["lru"]
    assert vs["request_throughput"] == pytest.approx((0.99 + 2.37 / 2.4) / 2)
    assert vs["mean_ttft_s"] == pytest.approx((1.05 + 9.3 / 9) / 2)
    assert "stock" not in paired_versus_stock(raw)
    assert loss(vs) == pytest.approx(vs["mean_ttft_s"] - 1)


def _doc(raw: dict, command: str, **settings) -> dict:
    base = {"trace": "team.jsonl", "chunk": 8, "vllm": "0.32.0", "model": "tiny", "runs": 1,
            "command": command, "seconds": 10}
    return {"settings": {**base, **settings},
            "loads": {"loaded": {"sec_multiplier": 0.0005, "blocks": 200, "requests": 120, "raw": raw}}}


def test_pooled_invocations_keep_each_round_paired_with_its_own_stock(tmp_path):
    from bench_scripts import load_script
    first = {"stock": [_run(3.0, 6, 10)], "lru": [_run(2.7, 6.6, 11)]}
    second = {"stock": [_run(2.4, 9, 13)], "lru": [_run(2.4, 9, 13)]}
    pooled = pool([_doc(first, "a"), _doc(second, "b")], ["a.json", "b.json"])["loaded"]
    assert pooled["raw"]["stock"] == first["stock"] + second["stock"]
    assert pooled["paired_vs_stock"] == paired_versus_stock({k: first[k] + second[k] for k in first})
    assert pooled["paired_vs_stock"]["lru"]["request_throughput"] == pytest.approx((0.9 + 1.0) / 2)
    assert pooled["variants"]["stock"]["runs"] == 2
    with pytest.raises(ValueError, match="b.json: settings.chunk"):
        pool([_doc(first, "a"), _doc(second, "b", chunk=16)], ["a.json", "b.json"])
    with pytest.raises(ValueError, match="b.json: load 'loaded' differs"):
        pool([_doc(first, "a"), _doc({"stock": second["stock"]}, "b")], ["a.json", "b.json"])
    # the script: the pooled file records where its rounds came from
    cc = load_script("connector_cost")
    a, b, out = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"
    a.write_text(json.dumps(_doc(first, "python -m benchmarks.connector_cost A")))
    b.write_text(json.dumps(_doc(second, "python -m benchmarks.connector_cost B")))
    assert cc.main(["--pool", f"{a},{b}", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["settings"]["pooled"] == ["python -m benchmarks.connector_cost A", "python -m benchmarks.connector_cost B"]
    assert doc["settings"]["runs"] == 2 and doc["settings"]["command"].endswith(f"--json {out}")
    with pytest.raises(SystemExit, match="--pool .*missing.json"):
        cc.main(["--pool", f"{a},{tmp_path / 'missing.json'}", "--json", str(out)])


def test_rounds_rotate_so_no_variant_always_runs_first():
    vs = ["stock", "noop", "lru", "pbkv-ta"]
    orders = [round_order(vs, r) for r in range(4)]
    assert orders[0] == vs and orders[1] == ["noop", "lru", "pbkv-ta", "stock"]
    assert all(sorted(o) == sorted(vs) for o in orders)
    assert {o[0] for o in orders} == set(vs)          # each variant first once in four rounds
    assert round_order([], 3) == []


def test_client_summary_in_seconds():
    raw = {"duration": 5.0, "completed": 3, "failed": 0, "request_throughput": 0.6,
           "mean_ttft_ms": 250.0, "p99_e2el_ms": 4000.0, "mean_tpot_ms": 12.5, "other": 1}
    s = summary(raw)
    assert s["mean_ttft_s"] == 0.25 and s["p99_e2el_s"] == 4.0 and s["mean_tpot_ms"] == 12.5
    assert "other" not in s and "mean_ttft_ms" not in s


def test_the_json_records_the_whole_command_with_the_trace_by_name():
    from bench_scripts import load_script
    cc = load_script("connector_cost")
    argv = ["--trace", "/tmp/x/team.jsonl", "--loads", "loaded", "--variants", "stock,lru", "--runs", "3",
            "--profile-process", "worker"]
    assert cc.command_line(argv) == ("python -m benchmarks.connector_cost --trace team.jsonl --loads loaded "
                                     "--variants stock,lru --runs 3 --profile-process worker")
    assert cc.command_line(["--trace=/a/b.jsonl"]) == "python -m benchmarks.connector_cost --trace=b.jsonl"


@requires_vllm
def test_variants_by_name():
    assert variant("stock").kv is None and not variant("stock").agentrt
    again = variant("stock-again")               # the A/A control: stock under another name
    assert again.kv is None and not again.runs_agentrt and again.server_args(9464) == []
    assert "A/A" in label("stock-again")
    noop = variant("noop")
    assert noop.kv["kv_connector"] == "NoopConnector" and not noop.env
    assert variant("noop-stock-binding").env == {"VLLM_CPU_NUM_OF_RESERVED_CPU": str(stock_reservation())}
    ours = variant("pbkv-ta")
    assert ours.agentrt and ours.kv["kv_connector_extra_config"]["policy"] == "pbkv-ta"
    old = variant("lru-vllm-binding")
    assert old.kv["kv_connector_extra_config"] == {"policy": "lru", "cpu_binding": "vllm"}
    every = variant("pbkv-ta-stats-every-step")
    assert every.kv["kv_connector_extra_config"] == {"policy": "pbkv-ta", "stats_interval_s": 0}
    hosted = variant("pbkv-ta-scheduler")       # agentrt in vLLM's scheduler: no connector configured
    assert hosted.kv is None and not hosted.agentrt and hosted.runs_agentrt
    args = hosted.server_args(9464)             # its metrics on a port of their own
    assert args[:2] == ["--scheduler-cls", "agentrt.vllm.scheduler.AgentRTScheduler"]
    assert json.loads(args[3])["agentrt"] == {"policy": "pbkv-ta", "metrics_port": 9464}
    assert label("pbkv-ta-scheduler").startswith("agentrt in vLLM's scheduler")
    assert variant("stock").server_args(9464) == []
    with pytest.raises(Exception, match="nosuch"):
        variant("nosuch-scheduler")
    assert ours.runs_agentrt and not variant("noop").runs_agentrt and not variant("stock").runs_agentrt
    with pytest.raises(Exception, match="nosuch"):
        variant("nosuch")


@requires_vllm
@needs_shared
@pytest.mark.slow
def test_lru_costs_a_sliver_and_loses_no_more_than_the_coarse_margin_to_stock(tiny_model, tmp_path):
    """The short CI version of the benchmark: one round of stock vLLM, the connector with `lru`
    and `lru` in vLLM's scheduler class on the same loaded replay, with vLLM's client. Every
    request answered; agentrt's hooks under `HOOK_SHARE` of the run (the class's figures from its
    own metrics port); and neither loses more than `COARSE_MARGIN` against stock on throughput or
    mean TTFT in the same round. The 3% target is the benchmark's, over rotated
    rounds; one round here resolves only a coarse margin (below), and the cause issue 37 found
    (the connector losing stock's CPU binding) is checked directly by
    `test_vllm_plugin.py::test_cpu_binding_as_stock_with_the_agentrt_connector_only`."""
    names = ["stock", "lru", "lru-scheduler"]
    res = measure([variant(n) for n in names], [Load("loaded", 0.0005, 200, 60)], str(MOONCAKE_CONV), 1,
                  tiny_model, tmp_path, 16, progress=lambda _: None)["loaded"]
    for name in names:
        r = res["raw"][name][0]
        # vLLM 0.32's client now and then fails to parse a streamed chunk of a request the server
        # answered (`vllm_client.py`): a couple of those are the client's, not the engine's
        assert r["completed"] + r["failed"] == 60 and r["failed"] <= 2, (name, r)
        assert r["engine"]["prefix_queries"] > 0 and 0.0 <= r["engine"]["prefix_hit_rate"] <= 1.0, (name, r)
        # each of vLLM's processes was found and used CPU over the run
        assert set(r["cpu_s"]) == {"api_server", "engine_core", "worker"} and min(r["cpu_s"].values()) > 0, r
        if name != "stock":
            assert r["connector"]["steps"] > 0 and r["connector"]["hook_s"] > 0, (name, r)
            assert summarize([r])["median"]["hook_share_of_run"] <= HOOK_SHARE, (name, r)
            vs = {k: v for k, v in res["paired_vs_stock"][name].items() if k != "mean_tpot_ms"}
            assert loss(vs) <= COARSE_MARGIN, (name, res["paired_vs_stock"])


@requires_vllm
def test_connector_hooks_time_the_real_connector_on_vllms_block_pool(tmp_path):
    """`benchmarks/connector_hooks.py`: the real connector on vLLM's BlockPool, driven by a trace's
    calls without an engine: every call and step counted, its time per step, and a prompt larger
    than the pool answered from its hit instead of failing the replay."""
    import json

    from bench_scripts import load_script
    from test_calibrate import _trace
    hooks = load_script("connector_hooks")
    trace = _trace(tmp_path / "t.jsonl")
    out = tmp_path / "hooks.json"
    assert hooks.main(["--trace", str(trace), "--policies", "lru,pbkv-ta", "--blocks", "64",
                       "--steps-per-call", "3", "--repeats", "1", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    rows = {r["policy"]: r for r in doc["policies"]}
    assert rows["lru"]["calls"] == 12 and rows["lru"]["steps"] == 36 and rows["lru"]["too_long"] == 0
    assert rows["pbkv-ta"]["hook_s"] > 0 and rows["pbkv-ta"]["hook_us_per_step"] > 0
    reqs, block = hooks.requests(str(trace))
    assert block == 32 and len(reqs[0].block_hashes) == 10
    assert hooks.replay("lru", reqs, block, 6, 1, 8)["too_long"] == 12       # 10-block prompts, 5 free blocks

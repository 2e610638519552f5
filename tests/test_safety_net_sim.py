"""The LRU safety net in the simulator (issue 41): on short coding sessions that compact often,
the published PBKV-HE loses to LRU (a compacted context's old history, read by the main agent
and the compaction call, outranks every live context); with the net it does not, and the bench
JSON says how long the net held LRU order. A policy that is no worse than LRU is left alone."""

from __future__ import annotations

import pytest

from agentrt.bench.runner import BenchOptions, run_bench
from agentrt.bench.source import file_source
from agentrt.trace.writer import write_trace
from agentrt.workloads.base import GenConfig
from agentrt.workloads.registry import get_workload

# 16 sessions, 6 at once, 64-token blocks, compaction past 30k tokens: every session compacts
OPTIONS = {"compact_min": 30_000, "compact_max": 30_000, "turns_scale": 2, "max_turns": 200}
GPU_BLOCKS = 2500


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    wl = get_workload("coding", OPTIONS)
    cfg = GenConfig(workflows=16, concurrency=6, block_size=64, seed=0)
    path = tmp_path_factory.mktemp("net") / "coding.jsonl"
    write_trace(path, wl.header(cfg), wl.generate(cfg))
    return path


def _bench(path, policies: list[str], net: bool) -> dict:
    popts = {"pbkv-he": {"predictor_kind": "markov"}} if "pbkv-he" in policies else {}
    opts = BenchOptions(gpu_blocks=GPU_BLOCKS, safety_net=net, policy_options=popts)
    return run_bench(file_source(path), policies, opts)["results"]


@pytest.mark.slow
def test_published_pbkv_he_loses_without_the_net_and_not_with_it(trace):
    off = _bench(trace, ["lru", "pbkv-he"], net=False)
    on = _bench(trace, ["pbkv-he"], net=True)
    lru = off["lru"]["hit_rate"]
    assert off["pbkv-he"]["hit_rate"] < lru - 0.02            # more than 2 points below LRU
    assert "safety_net" not in off["pbkv-he"]
    assert on["pbkv-he"]["hit_rate"] > lru - 0.01              # within a point with the net
    assert on["pbkv-he"]["ttft_mean_s"] < off["pbkv-he"]["ttft_mean_s"]
    net = on["pbkv-he"]["safety_net"]
    assert net["fallbacks"] >= 1 and net["fallback_share"] > 0.5 and net["fallback_s"] > 0


@pytest.mark.slow
def test_a_policy_no_worse_than_lru_keeps_control(trace):
    on = _bench(trace, ["lru", "pbkv-lae"], net=True)
    assert on["pbkv-lae"]["safety_net"]["fallbacks"] == 0
    assert "safety_net" not in on["lru"]                       # LRU has nothing to fall back to


def test_the_bench_report_names_what_the_net_held():
    from agentrt.bench.report import net_text
    doc = {"results": {"lru": {}, "pbkv-he": {"safety_net": {"fallbacks": 3, "fallback_share": 0.61}},
                       "pbkv-ta": {"safety_net": {"fallbacks": 0, "fallback_share": 0.0}}}}
    assert net_text(doc) == ("LRU safety net: LRU order while the policy measurably lost to LRU on the "
                             "same calls: pbkv-he for 61% of the run (3 times) (--no-safety-net: each "
                             "policy's own order throughout).")
    assert net_text({"results": {"lru": {}}}) is None

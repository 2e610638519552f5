"""The cluster oracle (`cluster.bounds`): pinned placement, the one-replica case, and the bound."""

from __future__ import annotations

import pytest

from agentrt.bench.runner import BenchOptions, run_oracle, run_policy
from agentrt.bench.source import workload_source
from agentrt.bounds.held import held_belady_bound
from agentrt.bounds.offline import belady_bound, infinite_bound
from agentrt.cluster.bounds import PinnedRouter, placement_bound, pooled_bound, run_cluster_oracle
from agentrt.cluster.routing import RouteRequest
from agentrt.cluster.run import run_cluster
from agentrt.engine.presets import get_preset
from agentrt.engine.simulator import EngineConfig
from agentrt.policies.registry import make_policy
from agentrt.sched.registry import make_scheduler
from agentrt.workloads.base import GenConfig

PRESET = "llama3.1-8b-h100"


@pytest.fixture(scope="module")
def gaia():
    src = workload_source("gaia", GenConfig(workflows=24, concurrency=12, seed=2))
    yield src
    src.close()


def config(bs: int, gpu: int) -> EngineConfig:
    return EngineConfig(get_preset(PRESET), bs, gpu_blocks=gpu)


def fcfs():
    return make_scheduler("fcfs")


def lru():
    return make_policy("lru")


def test_pinned_router_follows_the_placement_and_names_a_missing_call():
    r = PinnedRouter({("w", 0): 1, ("w", 1): 0})
    req = RouteRequest(tenant="t", workflow="w", agent=None, hash_ids=[1], prompt_tokens=16, call_index=1)
    assert r.route(req, [], 0.0) == 0
    req.call_index = 7
    with pytest.raises(RuntimeError, match="call 7 of workflow 'w'"):
        r.route(req, [], 0.0)


@pytest.mark.slow
def test_one_replica_equals_the_single_replica_oracle(gaia):
    """With one replica the cluster bound is the bench's `oracle`, figure for figure."""
    bs = gaia.header.block_size
    opts = BenchOptions(preset=PRESET, gpu_blocks=1200, concurrency=12)
    ref_single = run_policy(gaia, "lru", opts, record_stream=True)
    single, passes = run_oracle(gaia, opts, ref_single.admitted, passes=2)
    calls = list(gaia.eval_calls())
    got = run_cluster_oracle(calls, 1, "round-robin", config(bs, 1200), fcfs, reference=lru,
                             concurrency=12, passes=2)
    ref, bound = got.reference, got.bound
    assert got.passes == passes
    assert ref.total.gpu_hit_tokens == ref_single.metrics.gpu_hit_tokens
    assert bound.total.gpu_hit_tokens == single.metrics.gpu_hit_tokens
    assert bound.total.calls == single.metrics.calls


@pytest.mark.slow
@pytest.mark.parametrize("router", ["prefix", "agent"])
def test_bound_keeps_the_placement_and_beats_the_policies_on_it(gaia, router):
    bs = gaia.header.block_size
    cfg = config(bs, 700)
    calls = list(gaia.eval_calls())
    got = run_cluster_oracle(calls, 3, router, cfg, fcfs, reference=lru, concurrency=12)
    ref, bound = got.reference, got.bound
    assert 1 <= got.passes <= 2
    assert bound.router == router
    # every call served once, on the replica the reference run chose
    assert bound.total.calls == ref.total.calls == len(calls)
    assert [r.calls_routed for r in bound.replicas] == [r.calls_routed for r in ref.replicas]
    assert ref.total.evictions > 0                    # memory pressure: eviction order matters
    assert bound.total.gpu_hit_tokens > ref.total.gpu_hit_tokens
    # an online policy on the same placement stays at or below the bound
    for name in ("lru", "cachesage", "pbkv-lae"):
        cm = run_cluster(calls, 3, PinnedRouter(got.reference.placement), cfg, policy=name, concurrency=12)
        assert cm.total.gpu_hit_tokens <= bound.total.gpu_hit_tokens, name
    lru_pinned = run_cluster(calls, 3, PinnedRouter(got.reference.placement), cfg, policy="lru", concurrency=12)
    assert lru_pinned.total.gpu_hit_tokens == ref.total.gpu_hit_tokens   # pinning changes nothing


@pytest.mark.parametrize("n", [2, pytest.param(3, marks=pytest.mark.slow)])
def test_pooled_bound_is_above_every_router_and_policy_on_its_own_stream(gaia, n):
    """MIN over a run's block stream with the replicas' memory pooled bounds that run's hits,
    whatever the router and the eviction policy (the union of the caches is a cache of the pool),
    and so does MIN keeping what the run's calls held."""
    cfg = config(gaia.header.block_size, 500)
    calls = list(gaia.eval_calls())
    for router in ("round-robin", "prefix", "session", "agent"):
        for policy in ("lru", "pbkv-lae"):
            run = run_cluster(calls, n, router, cfg, policy=policy, concurrency=12, record_stream=True)
            assert run.total.evictions > 0
            b = pooled_bound(run, cfg)
            held = pooled_bound(run, cfg, "belady-held")
            placed = placement_bound(run, cfg)
            assert b.prompt_tokens == held.prompt_tokens == placed.prompt_tokens == run.total.prompt_tokens
            assert run.total.gpu_hit_tokens <= placed.hit_tokens <= held.hit_tokens <= b.hit_tokens, \
                (router, policy)
            assert b.hit_tokens <= infinite_bound(run.stream, cfg.block_size).hit_tokens
            # one replica's memory for the whole stream bounds less than the pool
            assert belady_bound(run.stream, cfg.block_size, cfg.gpu_blocks).hit_tokens <= b.hit_tokens


def test_pooled_bound_on_one_replica_is_the_bench_belady(gaia):
    opts = BenchOptions(preset=PRESET, gpu_blocks=600, concurrency=12)
    single = run_policy(gaia, "lru", opts, record_stream=True)
    cfg = config(gaia.header.block_size, 600)
    run = run_cluster(list(gaia.eval_calls()), 1, "round-robin", cfg, concurrency=12, record_stream=True)
    assert run.stream == single.stream
    assert pooled_bound(run, cfg).hit_tokens == belady_bound(single.stream, cfg.block_size, 600).hit_tokens
    one = held_belady_bound(single.stream, single.holds, cfg.block_size, 600).hit_tokens
    assert pooled_bound(run, cfg, "belady-held").hit_tokens == placement_bound(run, cfg).hit_tokens == one


def test_pooled_bound_needs_the_stream(gaia):
    cfg = config(gaia.header.block_size, 600)
    run = run_cluster(list(gaia.eval_calls())[:20], 2, "prefix", cfg, concurrency=12)
    for bound in (pooled_bound, placement_bound):
        with pytest.raises(ValueError, match="record_stream=True"):
            bound(run, cfg)


def test_placement_bound_is_above_the_cluster_oracle_on_the_same_placement(gaia):
    """The cluster oracle keeps every replica's accounting; the placement bound relaxes it, so on
    the oracle run's own stream it is at or above the oracle's hits."""
    cfg = config(gaia.header.block_size, 500)
    calls = list(gaia.eval_calls())
    got = run_cluster_oracle(calls, 2, "prefix", cfg, fcfs, reference=lru, concurrency=12, passes=1)
    pinned = PinnedRouter(got.reference.placement)
    from agentrt.policies.oracle import FutureUses, OraclePolicy
    from agentrt.cluster.bounds import _split
    parts = _split(calls, got.reference.placement, 2)
    futures = iter([FutureUses(parts[j], got.reference.orders[j], cfg.block_size) for j in range(2)])
    run = run_cluster(calls, 2, pinned, cfg, concurrency=12, record_stream=True,
                      policy_factory=lambda: OraclePolicy(next(futures)))
    assert run.total.gpu_hit_tokens == got.bound.total.gpu_hit_tokens
    assert run.total.gpu_hit_tokens <= placement_bound(run, cfg).hit_tokens


def test_passes_must_be_positive(gaia):
    with pytest.raises(ValueError, match="passes must be >= 1"):
        run_cluster_oracle([], 2, "prefix", config(gaia.header.block_size, 100), fcfs, reference=lru,
                           passes=0)


def test_the_run_summary_says_what_the_cluster_oracle_bounds():
    from agentrt.bench.report import run_summary
    cfg = {"preset": "p", "gpu_blocks": 10, "block_size": 16, "concurrency": 4, "replicas": 2,
           "router": "prefix", "time_scale": 1.0}
    doc = {"trace": "t", "calls": 1, "workflows": 1, "config": cfg, "results": {"lru": {}, "oracle": {}}}
    assert "oracle: clairvoyant eviction on the lru run's placement" in run_summary(doc)[2]
    cfg["oracle_reference"] = "pbkv-ta"
    assert "oracle: clairvoyant eviction on the pbkv-ta run's placement" in run_summary(doc)[2]
    doc["results"].pop("oracle")
    assert "oracle" not in run_summary(doc)[2]
    cfg["replicas"] = 1
    doc["results"]["oracle"] = {}
    assert "placement" not in run_summary(doc)[2]


def test_the_router_benchmark_renders_and_writes_the_bounds_table(tmp_path):
    from bench_scripts import load_script
    mod = load_script("router_bounds")

    def res(h):
        return {"hit_rate": h}
    run = {"workload": "gaia", "replicas": 4, "ceiling_hit_rate": 0.8, "routers": {
        r: {"lru": res(0.29 + d), "oracle on lru's placement": res(0.32 + d), "pbkv-ta": res(0.31 + d),
            "oracle on pbkv-ta's placement": res(0.34 + d)} for r, d in (("prefix", 0.0), ("agent", -0.01))}}
    doc = {"settings": {"command": "python -m benchmarks.routers --part bounds"}, "seconds": 5, "runs": [run]}
    md = mod.bounds_markdown(doc)
    row = md.splitlines()[-1]
    assert row.startswith("| gaia | 4 | 80.0 | 29.0 | 32.0 | 31.0 | 34.0 | 28.0 |")
    assert row.endswith("| 1.07 (prefix+pbkv-ta) | 0.912 |")
    page = tmp_path / "routers.md"
    page.write_text(f"before\n{mod.BOUNDS_START}\nold\n{mod.BOUNDS_END}\nafter\n")
    mod.write_docs(doc, page)
    text = page.read_text()
    assert "old" not in text and row in text and text.startswith("before") and text.endswith("after\n")
    run["pooled"] = {"lru": res(0.31), "oracle": res(0.435)}
    pooled_row = mod.bounds_markdown(doc).splitlines()[-1]
    assert pooled_row.endswith("| 31.0 | 43.5 | 1.07 (prefix+pbkv-ta) | 0.912 | 1.50 |")


def test_the_pooled_reference_pools_compute_and_memory(gaia):
    from bench_scripts import load_script
    mod = load_script("router_bounds")
    bs = gaia.header.block_size
    cfg = mod.pooled_config(bs, 4)
    one = mod.config(bs)
    assert cfg.gpu_blocks == 4 * one.gpu_blocks and cfg.max_running == 4 * one.max_running
    assert cfg.preset.gpu.peak_flops == 4 * one.preset.gpu.peak_flops
    got = mod.run_pooled(list(gaia.eval_calls()), 1, bs, passes=2)
    assert 1 <= got["oracle"]["passes"] <= 2
    assert got["oracle"]["hit_rate"] >= got["lru"]["hit_rate"] > 0

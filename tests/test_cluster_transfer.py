"""Peer KV transfer between simulated replicas (`cluster.transfer`): the lookup, what a fetched
prefix saves and costs, tenant isolation, accounting under memory pressure, and the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrt.api import simulate
from agentrt.bench.source import workload_source
from agentrt.cache.radix import RadixKVCache
from agentrt.cluster.bounds import PinnedRouter
from agentrt.cluster.registry import make_router
from agentrt.cluster.run import run_cluster
from agentrt.cluster.sim import ClusterSimulator
from agentrt.cluster.transfer import PeerTransfer, peer_lookup, resident_depth
from agentrt.engine.presets import get_preset
from agentrt.engine.simulator import EngineConfig
from agentrt.errors import AgentrtError
from agentrt.policies.registry import make_policy
from agentrt.trace.schema import Call
from agentrt.workloads.base import GenConfig
from test_cluster_cli import agentrt          # the real command line, one subprocess per call

REPO = Path(__file__).resolve().parents[1]
PRESET = "llama3.1-8b-h100"
BS = 16


def config(gpu: int) -> EngineConfig:
    return EngineConfig(get_preset(PRESET), BS, gpu_blocks=gpu)


def cached(cache: RadixKVCache, tenant: str, ids: list[int]) -> None:
    lease = cache.acquire(tenant, ids, len(ids), 1, 0.0)
    cache.commit_prompt(lease, 0.0)
    cache.release(lease)


def test_the_link_must_be_positive_and_converts_to_tokens():
    with pytest.raises(ValueError, match="gbps must be > 0"):
        PeerTransfer(0)
    t = PeerTransfer(25.0)
    assert t.bytes_s == 25e9
    assert t.tokens_per_s(131072) == pytest.approx(25e9 / 131072)


def test_lookup_takes_the_longest_peer_run_after_the_local_hits_and_stays_in_the_tenant():
    a, b, c = RadixKVCache(64), RadixKVCache(64), RadixKVCache(64)
    cached(a, "t1", [1, 2, 3])
    cached(b, "t1", [1, 2, 3, 4, 5])
    cached(b, "t2", [1, 2, 3, 4, 5, 6, 7])
    assert resident_depth(b, "t1", [1, 2, 3, 4, 5, 6], 6) == 5
    assert resident_depth(b, "t1", [1, 2, 3, 4, 5, 6], 2) == 2          # never past n_full
    look_c = peer_lookup([a, b, c], 2)
    assert look_c("t1", [1, 2, 3, 4, 5, 6], 0, 6) == 5                  # b holds the most
    assert look_c("t1", [1, 2, 3, 4, 5, 6], 3, 6) == 2                  # after 3 local hits
    assert look_c("t1", [9, 2, 3], 0, 3) == 0                           # another chain
    assert look_c("t3", [1, 2, 3], 0, 3) == 0                           # another tenant's tree
    assert peer_lookup([a, b, c], 1)("t1", [1, 2, 3, 4], 0, 4) == 3     # never itself


def two_calls(tenant2: str = "default") -> list[Call]:
    ids = list(range(100, 164))                                         # 64 blocks, 1,024 tokens
    first = Call(workflow="w", call=0, input_length=64 * BS + 5, output_length=2, hash_ids=ids + [1],
                 timestamp=0.0)
    second = Call(workflow="v", call=0, input_length=64 * BS + 5, output_length=2, hash_ids=ids + [2],
                  timestamp=5000.0, tenant=tenant2)
    return [first, second]


def run_pinned(calls: list[Call], gbps: float | None):
    sim = ClusterSimulator(config(400), 2, PinnedRouter({("w", 0): 0, ("v", 0): 1}), iter(calls),
                           lambda: make_policy("lru"),
                           transfer=PeerTransfer(gbps) if gbps is not None else None)
    sim.run()
    return sim


def test_a_prefix_cached_on_a_peer_is_fetched_not_computed():
    plain = run_pinned(two_calls(), None)
    moved = run_pinned(two_calls(), 25.0)
    m0, m1 = plain.sims[1].metrics, moved.sims[1].metrics
    assert m0.remote_hit_tokens == 0 and m0.prefill_tokens == 64 * BS + 5
    assert m1.remote_hit_tokens == 64 * BS                               # the 64 full blocks
    assert m1.prefill_tokens == 5
    block_bytes = config(400).block_bytes
    assert m1.net_bytes == 64 * block_bytes
    # the fetch costs its transfer time, and is still faster than computing 1,024 tokens here
    assert m1.ttft[0] >= 64 * block_bytes / 25e9
    assert m1.ttft[0] < m0.ttft[0]
    # the fetched blocks entered replica 1's tree; replica 0 kept its copy
    assert resident_depth(moved.sims[1].cache, "default", two_calls()[1].hash_ids, 64) == 64
    assert resident_depth(moved.sims[0].cache, "default", two_calls()[1].hash_ids, 64) == 64
    for s in moved.sims:
        s.cache.check_invariants()


def test_another_tenants_blocks_are_never_fetched():
    sim = run_pinned(two_calls(tenant2="other"), 25.0)
    assert sim.sims[1].metrics.remote_hit_tokens == 0
    assert sim.sims[1].metrics.net_bytes == 0


def test_a_slow_link_delays_the_first_token_by_the_transfer():
    fast, slow = run_pinned(two_calls(), 100.0), run_pinned(two_calls(), 0.01)
    nbytes = 64 * config(400).block_bytes
    assert slow.sims[1].metrics.ttft[0] >= nbytes / 0.01e9
    assert slow.sims[1].metrics.ttft[0] > fast.sims[1].metrics.ttft[0]


@pytest.mark.parametrize("router", ["least-loaded", "agent"])
def test_every_prompt_token_is_a_hit_or_computed_and_caches_stay_sound(router):
    """Under memory pressure (preemptions, fetches cut short): prompt tokens = GPU + host + peer
    hits + computed tokens, per replica, and every cache's invariants hold at the end."""
    src = workload_source("gaia", GenConfig(workflows=24, concurrency=12, seed=3))
    try:
        sim = ClusterSimulator(config(700), 3, make_router(router), src.eval_calls(),
                               lambda: make_policy("lru"), concurrency=12, transfer=PeerTransfer(5.0))
        sim.run()
    finally:
        src.close()
    fetched = 0
    for s in sim.sims:
        m = s.metrics
        assert m.prompt_tokens == m.gpu_hit_tokens + m.host_hit_tokens + m.remote_hit_tokens + m.prefill_tokens
        fetched += m.remote_hit_tokens
        s.cache.check_invariants()
    assert fetched > 0
    assert sum(s.metrics.preemptions for s in sim.sims) > 0


def test_the_router_is_told_the_link_speed():
    sim = ClusterSimulator(config(400), 2, make_router("agent"), iter(two_calls()),
                           lambda: make_policy("lru"), transfer=PeerTransfer(25.0))
    kv = get_preset(PRESET).model.kv_bytes_per_token
    assert sim.router.hints.transfer_tokens_per_s == pytest.approx(25e9 / kv)
    none = ClusterSimulator(config(400), 2, make_router("agent"), iter(two_calls()), lambda: make_policy("lru"))
    assert none.router.hints.transfer_tokens_per_s == 0.0
    from agentrt.cluster.routing import ClusterHints
    for bad in (-1.0, float("nan")):          # a deployment's setting (Ray's router options) is untrusted
        with pytest.raises(ValueError, match="transfer_tokens_per_s must be >= 0"):
            ClusterHints(block_size=16, transfer_tokens_per_s=bad)


def test_run_cluster_and_simulate_take_the_link():
    src = workload_source("team", GenConfig(workflows=16, concurrency=8, seed=1))
    try:
        cm = run_cluster(src.eval_calls(), 2, "least-loaded", config(500), concurrency=8, transfer_gbps=25.0)
    finally:
        src.close()
    assert cm.summary()["remote_hit_rate"] > 0
    res = simulate("team", ["lru"], workflows=16, concurrency=8, gpu_blocks=500, replicas=2,
                   router="least-loaded", transfer_gbps=25.0)
    assert res.config["transfer_gbps"] == 25.0
    with pytest.raises(AgentrtError, match="transfer_gbps needs replicas 2 or more"):
        simulate("team", ["lru"], workflows=8, transfer_gbps=25.0)
    with pytest.raises(AgentrtError, match="not a bound with peer transfer"):
        simulate("team", ["lru", "oracle"], workflows=8, replicas=2, transfer_gbps=25.0)


@pytest.mark.slow
def test_bench_transfer_flag_end_to_end(tmp_path):
    out = tmp_path / "t.json"
    p = agentrt("bench", "--workload", "team", "--workflows", "16", "--concurrency", "8",
                "--gpu-blocks", "500", "--replicas", "2", "--router", "least-loaded",
                "--transfer-gbps", "25", "--quiet", "--json", str(out))
    assert p.returncode == 0, p.stderr
    assert "peer KV transfer at 25 GB/s" in p.stdout and "peer hit" in p.stdout
    doc = json.loads(out.read_text())
    assert doc["config"]["transfer_gbps"] == 25.0
    assert "oracle" not in doc["results"]                    # dropped from the defaults with transfer
    online = {k: r for k, r in doc["results"].items() if not r.get("offline")}
    assert all(r["remote_hit_rate"] > 0 for r in online.values())
    # the pooled bounds hold with peer copies too: above what LRU saved from its own GPU and peers
    lru = online["lru"]
    assert lru["hit_rate"] + lru["remote_hit_rate"] <= doc["results"]["belady-held"]["hit_rate"] + 1e-12
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.Draft202012Validator(json.loads((REPO / "docs" / "results-schema.json").read_text())).validate(doc)
    for args, msg in ((("--transfer-gbps", "0", "--replicas", "2"), "--transfer-gbps must be a number > 0"),
                      (("--transfer-gbps", "25"), "--transfer-gbps needs --replicas 2 or more"),
                      (("--transfer-gbps", "25", "--replicas", "2", "--policies", "lru,oracle"),
                       "not a bound with peer transfer")):
        p = agentrt("bench", "--workflows", "8", "--quiet", *args)
        assert p.returncode == 2 and msg in p.stderr, p.stderr


def test_the_transfer_benchmark_renders_its_table_and_reads_the_pooled_reference(tmp_path):
    from bench_scripts import load_script
    mod = load_script("router_transfer")

    def fig(saved, remote=0.0, p99=1.0):
        return {"saved": saved, "remote_hit_rate": remote, "ttft_p99_s": p99}
    runs = {"prefix lru": fig(0.30, p99=5.0), "prefix lru +T": fig(0.31, 0.01, 4.0),
            "prefix pbkv-ta +T": fig(0.33, 0.01, 4.5), "agent pbkv-ta +T": fig(0.32, 0.02, 3.0)}
    doc = {"settings": {"command": "python -m benchmarks.router_transfer", "gbps": 25.0}, "seconds": 7,
           "runs": [{"workload": "gaia", "replicas": 4, "runs": runs}]}
    row = mod.markdown(doc).splitlines()[-1]
    assert row == "| gaia | 4 | 30.0 | 31.0 (1.0) | 33.0 (1.0) | 32.0 (2.0) | 1.10 (prefix pbkv-ta) | 5.00 / 4.50 |"
    bounds = tmp_path / "router_bounds.json"
    settings = {"preset": mod.PRESET, "gpu_tokens_per_replica": mod.GPU_TOKENS, "conc_per_replica": mod.CONC,
                "workflows_per_replica": {"gaia": mod.WORKFLOWS["gaia"]}}
    pooled = {"lru": {"hit_rate": 0.31}, "oracle": {"hit_rate": 0.42}}
    bounds.write_text(json.dumps({"settings": dict(settings, conc_per_replica=mod.CONC + 1),
                                  "runs": [{"workload": "gaia", "replicas": 4, "pooled": pooled}]}))
    mod.add_pooled(doc, bounds)
    assert "pooled" not in doc["runs"][0]                  # built on other settings: not used
    bounds.write_text(json.dumps({"settings": settings,
                                  "runs": [{"workload": "gaia", "replicas": 4, "pooled": pooled}]}))
    mod.add_pooled(doc, bounds)
    assert doc["runs"][0]["pooled"] == {"lru": 0.31, "oracle": 0.42}
    assert mod.markdown(doc).splitlines()[-1].endswith("| 31.0 | 42.0 | 1.10 (prefix pbkv-ta) | 5.00 / 4.50 |")
    runs[mod.ORACLE] = fig(0.40)
    row = mod.markdown(doc).splitlines()[-1]
    assert row.endswith("| 40.0 | 31.0 | 42.0 | 1.10 (prefix pbkv-ta) | 0.825 | 5.00 / 4.50 |")
    page = tmp_path / "routers.md"
    page.write_text(f"a\n{mod.START}\nold\n{mod.END}\nb\n")
    mod.write_docs(doc, page)
    assert "old" not in page.read_text() and "| gaia | 4 |" in page.read_text()


def test_schedulers_count_a_fetched_prefix_as_service_not_given():
    """LAS's attained service (prefill computed + output) does not charge the copied blocks."""
    from agentrt.sched.registry import make_scheduler
    from agentrt.sched.service import prefill_work

    def run(gbps):
        sim = ClusterSimulator(config(400), 2, PinnedRouter({("w", 0): 0, ("v", 0): 1}), iter(two_calls()),
                               lambda: make_policy("lru"), lambda: make_scheduler("las"),
                               transfer=PeerTransfer(gbps) if gbps else None)
        sim.run()
        return sim.sims[1].sched.service.ended
    assert run(None) == (("default", "v"), 64 * BS + 5 + 2)
    assert run(25.0) == (("default", "v"), 5 + 2)
    c = two_calls()[1]
    from agentrt.runtime import events as ev
    info = ev.CallInfo(rid=1, workflow="v", agent=None, tenant="default", index=0, hash_ids=c.hash_ids,
                       input_length=c.input_length, output_length=2, block_size=BS)
    assert prefill_work(info, 10, 4, 50) == 5 and prefill_work(info, 64, 0) == 5


def test_the_cluster_oracle_runs_with_transfer_and_counts_peer_hits():
    from agentrt.cluster.bounds import run_cluster_oracle
    from agentrt.sched.registry import make_scheduler
    src = workload_source("gaia", GenConfig(workflows=16, concurrency=8, seed=4))
    try:
        calls = list(src.eval_calls())
    finally:
        src.close()
    got = run_cluster_oracle(calls, 3, "least-loaded", config(700), lambda: make_scheduler("fcfs"),
                             reference=lambda: make_policy("lru"), concurrency=8, passes=2, transfer_gbps=25.0)
    ref, bound = got.reference.summary(), got.bound.summary()
    assert ref["remote_hit_rate"] > 0 and bound["remote_hit_rate"] > 0
    assert 1 <= got.passes <= 2
    assert bound["prefill_tokens"] < ref["prefill_tokens"]
    for m in (got.reference.total, got.bound.total):
        assert m.prompt_tokens == m.gpu_hit_tokens + m.remote_hit_tokens + m.prefill_tokens


@settings(max_examples=40, deadline=None)
@given(data=st.data(), n=st.integers(2, 3), gpu=st.integers(6, 16), host=st.sampled_from([0, 0, 6]),
       gbps=st.sampled_from([0.05, 25.0]), budget=st.sampled_from([16, 40, 8192]),
       router=st.sampled_from(["round-robin", "least-loaded", "prefix", "agent"]),
       policy=st.sampled_from(["lru", "pbkv-lae", "pbkv-ta"]))
def test_random_small_clusters_with_transfer_finish_sound(data, n, gpu, host, gbps, budget, router, policy):
    """Random tiny workflows sharing prefixes across replicas, with host tiers, slow or fast links,
    chunked prefills and preemptions: every call finishes once, every cache's invariants and block
    accounting hold at every step, and prompt tokens = GPU + host + peer hits + computed."""
    from agentrt.sched.registry import make_scheduler
    calls = []
    n_wf = data.draw(st.integers(1, 5))
    starts = sorted(data.draw(st.lists(st.integers(0, 50), min_size=n_wf, max_size=n_wf)))
    for w in range(n_wf):
        n_calls = data.draw(st.integers(1, 3))
        ids: list[int] = [data.draw(st.integers(1, 3)), 7]     # leading blocks shared across workflows
        for i in range(n_calls):
            ids = ids + [1000 * (w + 1) + 10 * i + k for k in range(data.draw(st.integers(0, 3)))]
            n_in = BS * len(ids) - data.draw(st.integers(0, BS - 1))
            n_out = data.draw(st.integers(1, 60))
            calls.append(Call(workflow=f"w{w}", call=i, input_length=n_in, output_length=n_out,
                              hash_ids=list(ids), agent=f"g{i % 2}", timestamp=starts[w] if i == 0 else None,
                              after=(i - 1,) if i else (), last=i == n_calls - 1))
    cfg = EngineConfig(get_preset(PRESET), BS, gpu_blocks=gpu, host_blocks=host, max_batch_tokens=budget)
    sim = ClusterSimulator(cfg, n, make_router(router), iter(calls), lambda: make_policy(policy),
                           lambda: make_scheduler("fcfs"), transfer=PeerTransfer(gbps))
    for s in sim.sims:
        step = s.step

        def checked_step(s=s, step=step):
            s.cache.check_invariants()
            held = [r for r in s.running if r.lease is not None]
            assert sum(r.lease.reserved for r in held) == s.cache.reserved
            return step()
        s.step = checked_step
    sim.run()
    total = 0
    for s in sim.sims:
        s.cache.check_invariants()
        assert not s.running and not s.waiting
        assert s.cache.reserved == 0 and s.cache.locked_gpu == 0
        m = s.metrics
        assert m.gpu_hit_tokens + m.host_hit_tokens + m.remote_hit_tokens + m.prefill_tokens == m.prompt_tokens
        total += m.calls
    assert total == len(calls)

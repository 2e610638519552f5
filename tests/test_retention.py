"""The retention floor and its ledger (`runtime/retention.py`, `runtime/floor.py`): what a
kv.retain / vllm.set_priority hint retains, within which budget, until when, and the order it
gives; exact orders in small scenarios, no engine.
"""

from __future__ import annotations

import pytest

from agentrt.cache.block import GPU, Block
from agentrt.runtime import events as ev
from agentrt.runtime.floor import RetentionFloor, owner_name
from agentrt.runtime.policy import Policy
from agentrt.runtime.retention import PriorityClaim, Retention, Span, plan
from agentrt.runtime.runtime import AgentRuntime


def chain(n: int, tenant: str = "a", first: int = 1) -> list[Block]:
    root, out = Block(0, None, GPU, tenant), []
    p = root
    for i in range(n):
        p = Block(first + i, p, GPU, tenant)
        out.append(p)
    return out


ALL = (Span(0, None, 50, 10.0),)


def test_plan_maps_token_ranges_to_blocks_first_span_wins():
    spans = (Span(0, 40, 90, 1.0), Span(16, None, 10, 2.0))
    assert plan(spans, 5, 16, 70) == [(90, 1.0), (90, 1.0), (90, 1.0), (10, 2.0), (10, 2.0)]
    assert plan((Span(0, None, 5, None, output=True),), 5, 16, 40) == [None, None, (5, None), (5, None), (5, None)]
    assert plan((Span(100, 120, 5, None),), 5, 16, 40) == [None] * 5       # past the request


def test_budget_and_tenant_shares_clip_at_the_first_block_that_does_not_fit():
    nodes = chain(12)
    r = Retention(capacity=40, fraction=0.25)               # 10 blocks
    assert r.retain("a", "retain:w", nodes, ALL, 16, 0, 0.0) == "clipped"
    assert len(r) == 10 and r.held == {"a": 10} and r.priority(nodes[9]) == 50 and r.priority(nodes[10]) == 0
    # a second tenant may hold half: its share is taken from what is over the first's share
    other = chain(8, "b", 100)
    assert r.retain("b", "retain:x", other, ALL, 16, 0, 0.0) == "clipped"
    assert r.held == {"a": 5, "b": 5} and r.counts["revoked"] == 5
    # revoked from the end of a's chain (equal deadlines: the block set last first)
    assert [r.priority(n) for n in nodes[:10]] == [50] * 5 + [0] * 5
    # a third tenant makes room the same way: a third each, the most over giving first
    assert r.retain("c", "retain:y", chain(2, "c", 200), ALL, 16, 0, 0.0) == "accepted"
    assert r.held == {"a": 4, "b": 4, "c": 2} and len(r) == 10 and r.counts["revoked"] == 7
    off = Retention(capacity=40, fraction=0.0)
    assert off.retain("a", "retain:w", nodes, ALL, 16, 0, 0.0) == "rejected:off"


def test_a_tenant_is_charged_once_per_block_and_over_its_share_is_refused():
    nodes = chain(6)
    r = Retention(capacity=40, fraction=0.25)
    for w in range(3):                                     # three workflows sharing a prefix
        assert r.retain("a", f"retain:w{w}", nodes, ALL, 16, 0, 0.0) == "accepted"
    assert r.held == {"a": 6} and len(r) == 6 and len(r.entries[nodes[0]]) == 3
    r.retain("b", "retain:b", chain(5, "b", 50), ALL, 16, 0, 0.0)
    assert r.held["b"] == 5
    # a is at 6 > its half (5): a new block of a is over its share
    assert r.retain("a", "retain:w9", chain(1, "a", 90), ALL, 16, 0, 0.0) == "rejected:over_tenant_share"


def test_deadlines_release_and_priority_zero():
    nodes = chain(4)
    r = Retention(capacity=100)
    r.retain("a", "retain:w", nodes, (Span(0, 32, 80, 5.0), Span(32, None, 20, 50.0)), 16, 0, 0.0)
    assert [r.priority(n) for n in nodes] == [80, 80, 20, 20]
    assert r.expire(4.9) == 0 and r.expire(5.0) == 2 and [r.priority(n) for n in nodes] == [0, 0, 20, 20]
    # a renewal takes the new deadline, and the old heap record is dropped when popped
    r.retain("a", "retain:w", nodes[2:3], (Span(0, None, 30, 100.0),), 16, 0, 10.0)
    assert r.expire(50.0) == 1 and r.priority(nodes[2]) == 30
    r.retain("a", "retain:w", nodes, (Span(32, 48, 0, None),), 16, 0, 60.0)      # priority 0 releases
    assert r.priority(nodes[2]) == 0 and r.counts["released"] == 1
    assert r.counts["expired"] == 3 and len(r) == 0 and r.held == {}


def test_renewals_keep_the_heaps_bounded():
    nodes = chain(8)
    r = Retention(capacity=100)
    for t in range(2000):
        r.retain("a", "retain:w", nodes, ALL, 16, 0, float(t))
    assert len(r._heap) <= 4 * len(r) + 1024 + 1 and r.expire(2009.0) == 8 and not r.entries


def test_owners_per_block_are_bounded():
    nodes = chain(1)
    r = Retention(capacity=1000)
    outs = [r.retain("a", f"retain:s{i}", nodes, ALL, 16, 0, 0.0) for i in range(20)]
    assert outs.count("accepted") == 16 and outs[-1] == "rejected:too_many_owners"


def test_set_priority_claims_follow_their_revisions():
    nodes = chain(4)
    r = Retention(capacity=100)
    assert r.claim("a", PriorityClaim("c", 1, 10, 60.0), nodes[:2], 0.0) == "accepted"
    assert r.claim("a", PriorityClaim("c", 0, 10, 60.0), nodes, 0.0) == "rejected:stale_revision"
    assert r.claim("a", PriorityClaim("c", 1, 11, 60.0), nodes, 0.0) == "rejected:conflict"
    # the same revision: the new blocks, no renewal of the old ones
    assert r.claim("a", PriorityClaim("c", 1, 10, 60.0), nodes, 30.0) == "accepted"
    assert r.expire(60.0) == 2 and [r.priority(n) for n in nodes] == [0, 0, 10, 10]
    # a higher revision replaces the claim; a value above 100 is 100; <= 0 and null only record
    assert r.claim("a", PriorityClaim("c", 2, 500, 10.0), nodes[:1], 61.0) == "accepted"
    assert [r.priority(n) for n in nodes] == [100, 0, 0, 0]
    assert r.claim("a", PriorityClaim("c", 3, None, None), nodes, 62.0) == "recorded" and not r.entries
    assert r.claim("a", PriorityClaim("d", 0, -5, 10.0), nodes, 62.0) == "recorded" and not r.entries
    # another tenant's claim of the same id is its own
    assert r.claim("b", PriorityClaim("c", 0, 5, 10.0), nodes[:1], 62.0) == "accepted"


class _Touch(Policy):
    name = "touch"


def test_floor_orders_retained_after_unretained_and_follows_events():
    led = Retention(capacity=100)
    floor = RetentionFloor(_Touch(), led)
    rt = AgentRuntime(floor)
    a, b = chain(2, first=1), chain(2, first=10)
    for i, n in enumerate(a + b):
        n.last_touch = 10 - i                  # LRU would evict b first
    e0 = floor.epoch
    floor.retain_path(0.0, "default", "wf", a[-1], 5.0, priority=70)
    floor.retain_path(0.0, "default", "other", b[0], 5.0, priority=20)
    assert floor.epoch > e0
    order = sorted(a + b, key=floor.score)
    assert order == [b[1], b[0], a[1], a[0]]       # unretained, then priority 20, then 70 (LRU within)
    # the workflow ending releases its own retention; an eviction takes the entry with the block
    rt.observe(ev.WorkflowEnded(1.0, "wf", "default"))
    assert floor.score(a[0])[0] == 0 and led.counts["released"] == 2
    rt.observe(ev.BlocksEvicted(1.0, [b[0]], False))
    assert led.counts["evicted"] == 1 and not led.entries
    floor.retain_path(2.0, "default", "wf", a[-1], 5.0)
    rt.observe(ev.BlocksEvicted(7.0, [], False))    # any event: the deadline passed
    assert not led.entries and led.counts["expired"] == 2
    st = floor.stats()
    assert st["retain_accepted"] == 3 and st["retained_blocks"] == 0
    assert owner_name(None, "wf") == "retain:wf" and owner_name("s", "wf") == "retain:s"


def test_bad_budgets_are_refused():
    with pytest.raises(ValueError, match="retain_budget"):
        Retention(fraction=1.5)
    with pytest.raises(ValueError, match="retain_max_s"):
        Retention(max_s=0)


def test_the_simulator_retains_tool_call_contexts_as_the_connector_would():
    from agentrt.bench.runner import BenchOptions, run_policy
    from agentrt.bench.source import workload_source
    from agentrt.workloads.base import GenConfig
    src = workload_source("gaia", GenConfig(workflows=12, concurrency=6, seed=3, tool_scale=4))
    try:
        plain = run_policy(src, "lru", BenchOptions(gpu_blocks=700, concurrency=6))
        sim = run_policy(src, "lru", BenchOptions(gpu_blocks=700, concurrency=6, retain_hints=0.0,
                                                  retain_budget=0.1))
    finally:
        src.close()
    assert not isinstance(plain.policy, RetentionFloor) and isinstance(sim.policy, RetentionFloor)
    c = sim.policy.ledger.counts
    assert c["accepted"] + c["clipped"] > 0 and c["expired"] + c["released"] + c["evicted"] + c["revoked"] > 0
    assert len(sim.policy.ledger) <= 70 and sim.metrics.calls == plain.metrics.calls


def test_bench_flags_for_retention_are_checked():
    from agentrt.bench.cli_spec import bench_spec
    from agentrt.errors import AgentrtError
    base = dict(trace=None, workload="gaia", policies="lru", gpu_blocks=500, host_blocks=0, preset="llama3.1-8b-h100",
                seed=0, workflows=4, concurrency=None, tool_scale=1.0, time_scale=1.0, json_path=None,
                csv_path=None, plot=None, train=None, train_fraction=None, predictor=None,
                predictor_kind="graphsage", predictor_noise=0.0, set_=[], scheduler="fcfs", max_wait=None,
                max_hold=None, tenant_weights=None)
    for extra, why in [(dict(engine="vllm", retain_hints=0.5), "simulator"),
                       (dict(engine="sim", retain_hints=0.5, replicas=2), "one replica"),
                       (dict(engine="sim", retain_budget=0.1), "give both"),
                       (dict(engine="sim", retain_hints=-1.0), "retain-hints"),
                       (dict(engine="sim", retain_hints=0.5, retain_budget=2.0), "retain-budget")]:
        with pytest.raises(AgentrtError, match=why):
            bench_spec(**base, **extra).validate()


def test_the_docs_table_is_rendered_from_the_saved_runs():
    """docs/notes/results-details.md's retention table is what benchmarks/retain_hints.py renders from its JSON."""
    import json
    from bench_scripts import BENCHMARKS, load_script
    mod = load_script("retain_hints")
    saved = {tuple(d["regime"][k] for k in mod.KEY): d["runs"]
             for d in json.loads((BENCHMARKS.parent / "docs/results/retain_hints.json").read_text())}
    text = mod.table([(row, saved[tuple(row[k] for k in mod.KEY)]) for row in mod.rows(1.3)], 0.5)
    docs = (BENCHMARKS.parent / "docs/notes/results-details.md").read_text()
    assert text.strip() in docs and "--retain-hints 0.5" in text

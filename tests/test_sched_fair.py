"""`fair`: weighted virtual time over tenants (from hand-built events), the weighted KV-cache shares
of `TenantShares` (eviction order while one tenant floods the cache), and the per-tenant GPU
block counts `RadixKVCache.tenant_blocks` they read, against the tree under random operations."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule

from agentrt.cache import GPU, HOST, RadixKVCache
from agentrt.engine.presets import get_preset
from agentrt.engine.simulator import EngineConfig, Simulator
from agentrt.policies.registry import make_policy
from agentrt.runtime import events as ev
from agentrt.runtime.policy import Policy
from agentrt.sched.base import Scheduler
from agentrt.sched.fair import FairScheduler
from agentrt.sched.kvshare import TenantShares
from agentrt.sched.registry import make_scheduler
from agentrt.errors import AgentrtError
from agentrt.trace.schema import Call
from test_cache_properties import CacheMachine

BS = 16
PRESET = get_preset("llama3.1-8b-h100")


def info(rid, tenant, wf=None, n_in=4 * BS, n_out=10, warmup=False):
    return ev.CallInfo(rid=rid, workflow=wf or f"w{rid}", agent=None, tenant=tenant, index=0,
                       hash_ids=[rid * 100 + k for k in range(n_in // BS)], input_length=n_in,
                       output_length=n_out, block_size=BS, warmup=warmup)


class View:
    def __init__(self, now=0.0):
        self.now = now

    def cached_blocks(self, call):
        raise AssertionError("fair does not read the cache")


def order(sched, calls, view):
    return [c.rid for c, a in sorted(calls, key=lambda ca: sched.rank(ca[0], ca[1], view))]


# ------------------------------------------------------------------ fair: virtual time
# Start-time fair queueing: a call's start tag is its tenant's virtual service at arrival, after
# which the tenant is charged (prompt + output) / weight; the cached part is refunded at admission.
def test_start_tags_charge_work_over_weight_and_refund_cached_prompt():
    s = FairScheduler(weights="a:2")
    a1, a2 = info(1, "a", n_in=100, n_out=40), info(2, "a", n_in=100, n_out=40)
    s.observe(ev.CallArrived(0, a1))
    s.observe(ev.CallArrived(0, a2))
    assert s.tags[1] == 0.0 and s.tags[2] == 140 / 2
    assert s.virtual["a"] == 140.0
    s.observe(ev.CallAdmitted(0, a1, None, 2, 1))          # 3 blocks cached: 48 tokens refunded
    assert s.virtual["a"] == 140.0 - 48 / 2
    v = View(now=1.0)
    assert order(s, [(a2, 0.0), (a1, 0.0)], v) == [1, 2]
    assert s.priority(a2, 0.0, v) == 70
    s.observe(ev.CallFinished(1, a1, None))
    assert 1 not in s.tags and s.backlog == {"a": 1}


def test_a_heavier_tenant_gets_more_of_the_queue():
    s = FairScheduler(weights="a:3")
    calls = []
    for k in range(6):
        for t in ("a", "b"):
            c = info(len(calls) + 1, t, n_in=100, n_out=0)
            s.observe(ev.CallArrived(0.0, c))
            calls.append((c, 0.01 * len(calls)))
    first6 = [c.tenant for c, _ in sorted(calls, key=lambda ca: s.rank(ca[0], ca[1], View(0.5)))][:6]
    assert first6.count("a") >= 4                      # about 3 of every 4


def test_warmups_are_not_charged_and_resumed_admissions_not_refunded_twice():
    s = FairScheduler()
    a = info(1, "a", n_in=100, n_out=5)
    s.observe(ev.CallArrived(0, a))
    s.observe(ev.CallAdmitted(0, a, None, 1, 0))
    after = s.virtual["a"]
    a.extra["resumed"] = 1
    s.observe(ev.CallAdmitted(1, a, None, 3, 0))
    w = info(2, "a", n_in=500, warmup=True)
    for e in (ev.CallArrived(0, w), ev.CallAdmitted(0, w, None, 0, 0), ev.CallFinished(0, w, None)):
        s.observe(e)
    assert s.virtual["a"] == after == 105 - BS and s.backlog == {"a": 1}
    s.observe(ev.CallFinished(2, a, None))
    assert s.backlog == {}


def test_a_quiet_tenant_is_not_queued_behind_a_whole_burst():
    s = FairScheduler()
    burst = [info(i, "a", n_in=100, n_out=0) for i in range(1, 11)]
    for c in burst:
        s.observe(ev.CallArrived(0.0, c))
    s.observe(ev.CallAdmitted(0.0, burst[0], None, 0, 0))
    quiet = info(99, "b", n_in=100, n_out=0)
    s.observe(ev.CallArrived(0.1, quiet))
    ranked = order(s, [(c, 0.0) for c in burst[1:]] + [(quiet, 0.1)], View(0.2))
    assert ranked.index(99) <= 2         # within a call or two of the head, not after 9 calls


# ------------------------------------------------------------------ fair: the prefill budget
# Start-time fair queueing of prefill chunks (`prefillshare.py`): an admitted call starts at its
# tenant's prefill clock (lifted to the system's virtual time when the tenant has nothing
# prefilling), the clock advances by prefill tokens / weight, and a chunk's tag is the virtual
# time of the call's next token.
def admit(s, c, gpu_hit=0, now=0.0):
    s.observe(ev.CallArrived(now, c))
    s.observe(ev.CallAdmitted(now, c, None, gpu_hit, 0))


def batch_order(s, running, now=0.0):
    """running: [(call, arrival, prefill_left)] -> rids in the order they get prefill tokens."""
    return [c.rid for c, a, left in sorted(running, key=lambda x: s.batch_rank(x[0], x[1], x[2], now))]


def serve(s, running, budget, iterations, now=0.0):
    """The simulator's chunking (`Simulator.step`): each iteration fills `budget` tokens greedily
    in batch order. running: {rid: [call, arrival, prefill_left]}; returns tokens per tenant."""
    got: dict[str, int] = {}
    for _ in range(iterations):
        left = budget
        for rid in batch_order(s, [tuple(v) for v in running.values() if v[2] > 0], now):
            c, _, p = running[rid]
            n = min(p, left)
            running[rid][2] -= n
            got[c.tenant] = got.get(c.tenant, 0) + n
            left -= n
            if running[rid][2] == 0:
                s.observe(ev.PromptCached(now, c, None, 0))
            if left == 0:
                break
    return got


def test_a_quiet_tenants_chunk_goes_before_a_bursts_earlier_admitted_calls():
    # the fair chunk order alone (no precedence for the least-served tenant: cap 0)
    s = FairScheduler(shared_chunk_tokens=0)
    b1, b2 = info(1, "b", n_in=1000 * BS), info(2, "b", n_in=1000 * BS)
    admit(s, b1)
    admit(s, b2)
    assert s.prefill.start == {1: 0.0, 2: 1000.0 * BS}
    running = [(b1, 0.0, 600 * BS), (b2, 0.0, 1000 * BS)]        # b1 is 400 blocks in
    assert batch_order(s, running) == [1, 2]
    a1 = info(3, "a", n_in=10 * BS)
    admit(s, a1, now=1.0)
    # a re-enters at the system's virtual time (b1's next token), not behind b's admitted work,
    # and with the same tag goes first: fewer tokens left
    assert s.prefill.start[3] == 400.0 * BS
    assert batch_order(s, running + [(a1, 1.0, 10 * BS)]) == [3, 1, 2]
    a2 = info(4, "a", n_in=10 * BS)
    admit(s, a2, now=1.0)                                        # a has a call prefilling: its clock
    assert s.prefill.start[4] == 410.0 * BS
    # b1's next token (400 blocks in) is tagged before a2's first
    assert batch_order(s, running + [(a2, 1.0, 10 * BS), (a1, 1.0, 10 * BS)]) == [3, 1, 4, 2]


def test_backlogged_tenants_share_the_budget_by_weight():
    s = FairScheduler(weights="a:3", shared_chunk_tokens=0)
    running = {}
    for rid, tenant in enumerate(["b", "a", "b", "a"], start=1):
        c = info(rid, tenant, n_in=10_000)
        admit(s, c)
        running[rid] = [c, 0.0, 10_000]
    got = serve(s, running, budget=100, iterations=80)          # 8000 tokens, nobody runs dry
    assert got["a"] + got["b"] == 8000
    assert abs(got["a"] - 3 * got["b"]) <= 2 * 100               # 3:1, within one chunk each
    s = FairScheduler(shared_chunk_tokens=0)
    running = {}
    for rid, tenant in enumerate(["b"] * 6 + ["a"], start=1):   # a burst of 6 against one call
        c = info(rid, tenant, n_in=1000)
        admit(s, c)
        running[rid] = [c, 0.0, 1000]
    got = serve(s, running, budget=100, iterations=16)
    assert got["a"] == got["b"] == 800                           # equal weights: equal tokens


def test_an_idle_tenant_banks_no_credit_and_resumed_calls_are_not_charged():
    s = FairScheduler(shared_chunk_tokens=0)
    a_old = info(1, "a", n_in=100)
    admit(s, a_old)
    s.observe(ev.PromptCached(0.0, a_old, None, 0))
    assert s.prefill.clock["a"] == 100.0 and not s.prefill.start
    b = [info(10 + k, "b", n_in=1000) for k in range(3)]
    for c in b:
        admit(s, c)                                              # b re-enters at the largest clock
    assert [s.prefill.start[c.rid] for c in b] == [100.0, 1100.0, 2100.0]
    assert batch_order(s, [(b[0], 0.0, 500), (b[1], 0.0, 1000)]) == [10, 11]
    a_new = info(2, "a", n_in=100)
    admit(s, a_new, now=5.0)
    assert s.prefill.start[2] == 600.0                           # b's next token, not a's old 100
    clock = s.prefill.clock["b"]
    b[0].extra["resumed"] = 1
    admit(s, b[0], now=6.0)                                      # readmitted after a preemption
    assert s.prefill.clock["b"] == clock
    assert s.prefill.start[10] == 600.0                           # the system's virtual time
    for c in b + [a_new]:
        s.observe(ev.CallFinished(7.0, c, None))
    assert not s.prefill.start and not s.prefill.work and not s.prefill.head and not s.prefill.prefilling


def test_warmups_take_their_tenants_prefill_share():
    s = FairScheduler()
    w = info(1, "a", n_in=50 * BS, warmup=True)
    admit(s, w, gpu_hit=10)
    assert s.prefill.clock["a"] == 40.0 * BS and 1 not in s.tags
    s.observe(ev.CallFinished(1.0, w, None))
    assert not s.prefill.start


class _AgingFair(FairScheduler):
    ages_batch = True


def test_aging_does_not_override_the_fair_prefill_order_but_does_for_others():
    """Both calls have waited past max_wait_s (as a burst's calls have under overload): arrival
    order would give the old one the budget; fair keeps its own order."""
    order_of = {}
    for cls in (FairScheduler, _AgingFair):
        s = cls(max_wait_s=1.0, shared_chunk_tokens=0)
        b, a = info(1, "b", n_in=1000), info(2, "a", n_in=100)
        admit(s, b)
        admit(s, a, now=50.0)                                    # a's start: b's start (0)
        order_of[cls] = batch_order(s, [(b, 0.0, 900), (a, 50.0, 100)], now=100.0)
    assert order_of[FairScheduler] == [2, 1]
    assert order_of[_AgingFair] == [1, 2]
    assert Scheduler.ages_batch and not FairScheduler.ages_batch
    assert Scheduler(max_wait_s=1.0).batch_rank(info(1, "b"), 0.0, 10, 100.0)[0] == 0


def test_fair_state_bytes_counts_the_prefill_clock():
    s = FairScheduler()
    base = s.state_bytes()
    admit(s, info(1, "a"))
    assert s.state_bytes() > base


def burst_and_quiet_trace(n_burst=8, burst_blocks=128, quiet_at=0.05):
    calls = [sim_call(f"f{k}", 0, [1000 * (k + 1) + j for j in range(burst_blocks)], "f", ts=0.0)
             for k in range(n_burst)]
    calls.append(sim_call("q0", 0, list(range(1, 5)), "q", ts=quiet_at))
    return calls


@pytest.mark.parametrize("max_wait_s", [1e-3, 60.0])
def test_in_the_simulator_a_quiet_call_is_not_queued_behind_an_aged_burst(max_wait_s):
    """A burst's calls are admitted at once and have aged (max_wait_s 1 ms) by the time a quiet
    tenant's small call arrives: under fair the quiet call still prefills in its first iteration,
    whatever max_wait_s; arrival order (fcfs) gives it the budget only after the burst."""
    calls = burst_and_quiet_trace()
    cfg = dict(preset=PRESET, block_size=BS, gpu_blocks=4000, max_batch_tokens=512)
    runs = {}
    for name in ("fair", "fcfs"):
        sim = Simulator(EngineConfig(**cfg), make_policy("lru"), iter(calls),
                        scheduler=make_scheduler(name, max_wait_s=max_wait_s))
        m = sim.run()
        sim.cache.check_invariants()
        assert m.calls == len(calls)
        runs[name] = (m.tenants["q"].ttft[0], max(m.tenants["f"].ttft))
    one_iteration = Simulator(EngineConfig(**cfg), make_policy("lru"), iter([])).cost.prefill(512, 128 * BS)
    q_fair, f_fair = runs["fair"]
    q_fcfs, f_fcfs = runs["fcfs"]
    assert q_fair <= 3 * one_iteration < q_fcfs
    assert q_fcfs > 0.5 * f_fcfs                                  # fcfs: behind most of the burst


# ------------------------------------------------------------------ TenantShares
def fill(cache, tenant, ids, now):
    lease = cache.acquire(tenant, ids, len(ids), 0, now)
    assert lease is not None
    cache.commit_prompt(lease, now)
    cache.release(lease)


def expected_flood_evictions(flood, quiet, w_flood, w_quiet, h=0.05):
    """Flood blocks evicted before the first quiet one, per the documented rule (one block at a
    time, shares of the pool re-checked after each eviction; within a group LRU, and quiet's are
    older). The pool is the cache the scenario fills: flood + quiet blocks."""
    over: set = set()
    n = 0
    pool = flood + quiet
    while flood > 0:
        blocks = {"flood": flood, "quiet": quiet}
        w = {"flood": w_flood, "quiet": w_quiet}
        over = {t for t in blocks if blocks[t] > pool * w[t] / (w_flood + w_quiet)
                or (t in over and blocks[t] > pool * w[t] / (w_flood + w_quiet) * (1 - h))}
        if "quiet" in over or "flood" not in over:
            return n
        flood -= 1
        n += 1
    return n


def drain(pol, cache):
    """Evict everything one block at a time, re-checking the shares after each; the victims'
    tenants and the counts just before each eviction."""
    evicted, log = [], []
    while cache.gpu_used:
        log.append(dict(cache.tenant_blocks))
        victim = cache.peek_victims(1)[0]
        assert cache.evict(1) == 1
        evicted.append(victim.tenant)
        pol.observe(ev.BlocksEvicted(2.0, [victim], False))
        cache.check_invariants()
    return evicted, log


def flood_scenario(weights, quiet=4, flood=16):
    pol = TenantShares(Policy(), weights)
    cache = RadixKVCache(quiet + flood, 0, pol, block_bytes=1)
    pol.attach(cache)
    fill(cache, "quiet", list(range(1, quiet + 1)), 0.0)           # the oldest blocks (LRU's victims)
    fill(cache, "flood", list(range(100, 100 + flood)), 1.0)
    pol.observe(ev.BlocksEvicted(1.0, [], False))                  # any event re-checks the shares
    evicted, counts = drain(pol, cache)
    return evicted, list(zip(evicted, counts)), pol


def test_plain_lru_would_evict_the_quiet_tenant_first():
    cache = RadixKVCache(20, 0, Policy(), block_bytes=1)
    fill(cache, "quiet", [1, 2, 3, 4], 0.0)
    fill(cache, "flood", list(range(100, 116)), 1.0)
    assert cache.peek_victims(1)[0].tenant == "quiet"
    assert cache.evict(4) == 4 and cache.tenant_blocks == {"quiet": 0, "flood": 16}


def test_the_flooding_tenant_is_evicted_until_within_its_share():
    evicted, log, pol = flood_scenario({})
    n = evicted.index("quiet")
    assert n == expected_flood_evictions(16, 4, 1.0, 1.0) == 7
    assert evicted[:n] == ["flood"] * n
    # when the first quiet block goes, the flooding tenant holds no more than its share of the pool
    tenant, before = log[n]
    assert before["flood"] <= 20 / 2
    assert pol.over == set() or "flood" not in pol.over


def test_weights_scale_the_shares():
    evicted, log, _ = flood_scenario({"flood": 3.0})
    n = evicted.index("quiet")
    assert n == expected_flood_evictions(16, 4, 3.0, 1.0) == 2
    assert evicted[:n] == ["flood"] * n
    _, before = log[n]
    assert before["flood"] <= 0.75 * 20
    # a heavier quiet tenant protects its blocks longer
    evicted, _, _ = flood_scenario({"quiet": 4.0})
    assert evicted.index("quiet") == expected_flood_evictions(16, 4, 1.0, 4.0) == 13
    assert evicted.index("quiet") > 7


def test_a_single_tenant_is_never_over_its_share():
    pol = TenantShares(Policy())
    cache = RadixKVCache(10, 0, pol, block_bytes=1)
    pol.attach(cache)
    fill(cache, "a", [1, 2, 3, 4, 5, 6], 0.0)
    pol.observe(ev.BlocksEvicted(0.0, [], False))
    assert pol.over == set()
    # a tenant with a call in flight and no blocks counts: "a" is now over its half of the pool
    epoch = pol.epoch
    pol.observe(ev.CallArrived(1.0, info(1, "b")))
    assert pol.over == {"a"} and pol.epoch == epoch + 1
    pol.observe(ev.CallFinished(2.0, info(1, "b"), None))
    assert pol.over == set() and pol.epoch == epoch + 2


def test_tenant_shares_rejects_bad_hysteresis_and_forwards_the_inner_policy():
    import pytest
    with pytest.raises(ValueError, match="hysteresis"):
        TenantShares(Policy(), hysteresis=1.0)
    inner = make_policy("pbkv-lae")
    w = TenantShares(inner)
    assert w.name == inner.name and w.needs_tags == inner.needs_tags and w.acts == inner.acts
    assert w.wants_events and w.dynamic


# ------------------------------------------------------------------ fair in the simulator
def sim_call(wf, i, ids, tenant, ts=None, n_out=2, last=True):
    return Call(workflow=wf, call=i, input_length=BS * len(ids), output_length=n_out, hash_ids=list(ids),
                timestamp=ts, after=(i - 1,) if i else (), last=last, tenant=tenant)


def quiet_vs_flood_trace():
    """Tenant q runs an agent with a 6-block system prompt, then again 5 s later; meanwhile tenant
    f sends 12 one-call workflows of 6 distinct blocks each. 20 GPU blocks hold q's prompt and
    two of f's; under plain LRU f's flood evicts q's prompt before q comes back."""
    q_prompt = list(range(1, 7))
    calls = [sim_call("q0", 0, q_prompt + [7], "q", ts=0)]
    for k in range(12):
        calls.append(sim_call(f"f{k}", 0, [1000 * (k + 1) + j for j in range(6)], "f", ts=100 + 300 * k))
    calls.append(sim_call("q1", 0, q_prompt + [8], "q", ts=5000))
    calls.sort(key=lambda c: c.timestamp)
    return calls


def run_sim(calls, gpu_blocks, scheduler=None, policy="lru"):
    cfg = EngineConfig(preset=PRESET, block_size=BS, gpu_blocks=gpu_blocks)
    sim = Simulator(cfg, make_policy(policy), iter(calls), scheduler=scheduler)
    m = sim.run()
    sim.cache.check_invariants()
    assert m.calls == len(calls) and not sim.waiting and not sim.running
    return sim, m


def test_fair_keeps_the_quiet_tenants_prompt_through_a_flood():
    calls = quiet_vs_flood_trace()
    sim, m = run_sim(calls, 20)
    assert m.gpu_hit_tokens == 0                       # lru: q's prompt was flooded out
    sim, m = run_sim(calls, 20, make_scheduler("fair"))
    assert isinstance(sim.policy, TenantShares)
    assert m.gpu_hit_tokens == 6 * BS                  # q's second call hit its whole prompt
    assert sim.cache.tenant_blocks["q"] >= 6
    # an explicit equal weight changes nothing; weighting the flood 9:1 lets it take q's blocks
    _, m_eq = run_sim(calls, 20, make_scheduler("fair", weights="q:1,f:1"))
    assert m_eq.gpu_hit_tokens == 6 * BS
    _, m_heavy = run_sim(calls, 20, make_scheduler("fair", weights="f:9"))
    assert m_heavy.gpu_hit_tokens < 6 * BS


# ------------------------------------------------------------------ tenant_blocks vs the tree
def count_tree(cache):
    out = {}
    for tenant, root in cache.roots.items():
        n = 0
        stack = list(root.children.values())
        while stack:
            b = stack.pop()
            assert b.tenant == tenant
            if b.tier == GPU:
                n += 1
            stack.extend(b.children.values())
        out[tenant] = n
    return out


class TenantBlocksMachine(CacheMachine):
    """The cache property machine, plus prefetches, checking `tenant_blocks` by a tree walk."""

    @rule(i=st.integers(0, 1000), n=st.integers(1, 4), below=st.booleans())
    def prefetch(self, i, n, below):
        host = [b for root in self.cache.roots.values() for b in _walk(root) if b.tier == HOST]
        if host:
            self.cache.prefetch(host[i % len(host)], self._tick(), n, evict_below=float("inf") if below else None)

    @invariant()
    def tenant_blocks_match_the_tree(self):
        if hasattr(self, "cache"):
            tree = count_tree(self.cache)
            tb = {t: n for t, n in self.cache.tenant_blocks.items() if n}
            assert {t: n for t, n in tree.items() if n} == tb
            assert all(n >= 0 for n in self.cache.tenant_blocks.values())
            assert sum(self.cache.tenant_blocks.values()) == self.cache.gpu_used
            # per-tenant reservations are the sum of that tenant's live leases' reservations
            held: dict = {}
            for lease, _ in self.admitted + self.running:
                held[lease.tenant] = held.get(lease.tenant, 0) + lease.reserved
            assert {t: n for t, n in self.cache.tenant_reserved.items() if n} == {t: n for t, n in held.items() if n}


def _walk(root):
    stack = list(root.children.values())
    while stack:
        b = stack.pop()
        yield b
        stack.extend(b.children.values())


TenantBlocksMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=40, deadline=None)
TestTenantBlocks = TenantBlocksMachine.TestCase


# ------------------------------------------------------------------ prefetch bounds under TenantShares
class _StepsLike(Policy):
    """kvflow-like keys: blocks due later (ids >= 10: 5 steps away) are evicted first."""

    def score(self, b):
        return (-(5 if b.hash >= 10 else 1), b.last_touch)


class _PBKVLike(Policy):
    """pbkv-like keys for active blocks: (1, value, touch)."""

    def score(self, b):
        return (1, 0.0, b.last_touch)


def _prefetch_scenario(inner, bound, wrap):
    """One tenant: its 2-block path on the host, the 4 GPU blocks full of its unlocked cache; a
    prefetch of the path may evict GPU blocks the policy scores strictly below `bound`."""
    pol = TenantShares(inner) if wrap else inner
    cache = RadixKVCache(4, 4, pol, block_bytes=1)
    if wrap:
        pol.attach(cache)
    fill(cache, "a", [1, 2], 0.0)
    assert cache.evict(2) == 2
    fill(cache, "a", [10, 11, 12, 13], 1.0)
    if wrap:
        pol.observe(ev.BlocksEvicted(1.0, [], False))
        assert pol.over == set()                    # one tenant: the wrapper should be neutral
    if wrap:
        bound = pol.bound(bound)            # as TenantShares.act translates a prefetch's bound
    loaded = cache.prefetch(cache.lookup("a", [1, 2]), 2.0, 2, evict_below=bound)
    cache.check_invariants()
    return [b.hash for b in loaded]


def test_prefetch_bounds_without_the_wrapper():
    assert _prefetch_scenario(_StepsLike(), (-1, -1), wrap=False) == [1, 2]
    assert _prefetch_scenario(_PBKVLike(), (1, 0.5, -1), wrap=False) == [1, 2]


def test_tenant_shares_keeps_kvflow_prefetch_bounds_with_one_tenant():
    assert _prefetch_scenario(_StepsLike(), (-1, -1), wrap=True) == [1, 2]


def test_tenant_shares_with_pbkv_aggressive_bounds_does_not_crash():
    assert _prefetch_scenario(_PBKVLike(), (1, 0.5, -1), wrap=True) == [1, 2]


def test_fair_with_pbkv_aggressive_and_a_host_tier_runs():
    from agentrt.bench.runner import BenchOptions, run_bench
    from agentrt.bench.source import workload_source
    from agentrt.workloads.base import GenConfig
    src = workload_source("mix", GenConfig(workflows=12, seed=0, concurrency=8))
    try:
        doc = run_bench(src, ["pbkv-aggressive"], BenchOptions(gpu_blocks=600, host_blocks=1500, scheduler="fair"))
    finally:
        src.close()
    assert doc["results"]["pbkv-aggressive"]["calls"] > 0


# ------------------------------------------------------------------ max-min: idle or invented tenants do not dilute
def sybil_cache(extra: int, weights=None):
    """quiet's 8 blocks (the oldest), flood's 12, then `extra` tenants of one block each, in a
    pool they fill; the shares checked once."""
    pol = TenantShares(Policy(), weights)
    cache = RadixKVCache(8 + 12 + extra, 0, pol, block_bytes=1)
    pol.attach(cache)
    fill(cache, "quiet", list(range(1, 9)), 0.0)
    fill(cache, "flood", list(range(100, 112)), 1.0)
    for k in range(extra):
        fill(cache, f"sybil{k}", [1000 + k], 1.5)
    pol.observe(ev.BlocksEvicted(1.0, [], False))
    return pol, cache


@pytest.mark.parametrize("extra", [0, 10])
def test_tenants_holding_almost_nothing_do_not_dilute_the_contending_shares(extra):
    # 10 invented tenants of one block each make everyone's guarantee 30 / 12 = 2.5 blocks, so
    # both contenders are over it; what the small ones leave is split: a level of 10 each
    pol, cache = sybil_cache(extra)
    assert pol.over >= {"flood"} and pol.beyond <= {"flood"}
    assert not any(t.startswith("sybil") for t in pol.over)
    evicted, log = drain(pol, cache)
    n = evicted.index("quiet")
    assert evicted[:n] == ["flood"] * n and n == 3                 # 12 -> 9: below 10 * (1 - 0.05)
    assert log[n]["flood"] <= 20 / 2


def test_without_the_level_the_diluted_guarantee_would_not_protect():
    # the same scenario ranked by the guarantee alone: both contenders are over 2.5, so LRU
    # evicts the quiet tenant's older blocks first; the level is what protects it
    pol, cache = sybil_cache(10)
    assert pol.over == {"quiet", "flood"} and pol.beyond == {"flood"}
    assert cache.peek_victims(1)[0].tenant == "flood"
    pol.beyond = set()                                             # as the guarantee-only rule ranked
    pol._bumps += 1
    assert cache.peek_victims(1)[0].tenant == "quiet"


def test_weights_scale_the_level():
    pol, cache = sybil_cache(10, {"flood": 3.0})
    # guarantee: quiet 30/13, flood 90/13 (both over); level of 20: quiet 5, flood 15
    assert pol.over == {"quiet", "flood"} and pol.beyond == {"quiet"}
    assert cache.peek_victims(1)[0].tenant == "quiet"


class HeldView:
    """`fair.defer`'s view: a pool, and per tenant its running and cached blocks."""

    def __init__(self, capacity, running, cached):
        self.capacity_blocks, self.running, self.cached = capacity, running, cached

    def tenant_running_blocks(self, tenant):
        return self.running.get(tenant, 0)

    def tenant_cached_blocks(self, tenant):
        return self.cached.get(tenant, 0)


def test_running_shares_are_max_min_over_what_other_tenants_hold_and_need():
    s = FairScheduler()
    s.observe(ev.CallArrived(0.0, info(1, "a", wf="a1")))
    s.observe(ev.CallArrived(0.0, info(2, "b", wf="b1")))
    for k in range(10):                      # idle tenants: a workflow open, nothing in flight
        s.observe(ev.CallArrived(0.0, info(100 + k, f"idle{k}", wf=f"i{k}")))
        s.observe(ev.CallFinished(0.0, info(100 + k, f"idle{k}", wf=f"i{k}"), None))
    call = info(3, "a", wf="a1", n_in=4 * BS, n_out=0)       # 4 blocks more
    # b holds 60 and wants more: the static half each; the idle tenants hold nothing
    assert not s.defer(call, 0.0, HeldView(100, {"a": 40, "b": 60}, {"a": 40, "b": 60}))   # 44 <= 50
    assert s.defer(call, 0.0, HeldView(100, {"a": 47, "b": 60}, {"a": 47, "b": 60}))       # 51 > 50
    # ten idle tenants holding 2 cached blocks each reserve those, not a twelfth of the pool each
    idle = {f"idle{k}": 2 for k in range(10)}
    assert not s.defer(call, 0.0, HeldView(100, {"a": 30, "b": 60}, {"a": 30, "b": 60, **idle}))  # 34 <= 40
    # a tenant that needs less than half leaves the rest: b holds 20 and ran at most 20 at once
    s2 = FairScheduler()
    s2.observe(ev.CallArrived(0.0, info(1, "a", wf="a1")))
    s2.observe(ev.CallArrived(0.0, info(2, "b", wf="b1", n_in=20 * BS, n_out=0)))
    assert not s2.defer(info(2, "b", wf="b1", n_in=20 * BS, n_out=0), 0.0, HeldView(100, {}, {"a": 0}))
    assert s2.peak_running.get("b") == 20
    assert not s2.defer(call, 0.0, HeldView(100, {"a": 54, "b": 20}, {"a": 54, "b": 20}))  # 58 <= 100 - 40
    assert s2.defer(call, 0.0, HeldView(100, {"a": 57, "b": 20}, {"a": 57, "b": 20}))      # 61 > 60
    # when b's last workflow ends its peak is forgotten (bounded state)
    s2.observe(ev.WorkflowEnded(1.0, "b1", "b"))
    assert "b" not in s2.peak_running
    assert len(s2.peak_running) == 2                    # a1 is still open, with a's peak


def test_a_burst_stops_reserving_running_memory_once_its_workflows_end():
    """b's workflows overlap without pause: its burst's peak counts while a workflow that ran
    then is open, and stops counting once every one of them has ended."""
    s = FairScheduler()
    s.observe(ev.CallArrived(0.0, info(1, "a", wf="a1")))
    call = info(9, "a", wf="a1", n_in=4 * BS, n_out=0)
    for k in range(3):                                   # b's burst: three workflows, 60 blocks running
        s.observe(ev.CallArrived(0.0, info(10 + k, "b", wf=f"b{k}", n_in=20 * BS, n_out=0)))
    assert not s.defer(info(10, "b", wf="b0", n_in=20 * BS, n_out=0), 0.0, HeldView(100, {}, {}))
    assert not s.defer(info(12, "b", wf="b2", n_in=20 * BS, n_out=0), 0.0,
                       HeldView(100, {"b": 40}, {"a": 0}))
    assert s.peak_running.get("b") == 60
    s.observe(ev.CallArrived(1.0, info(20, "b", wf="b3", n_in=5 * BS, n_out=0)))   # a quiet session opens
    assert not s.defer(info(20, "b", wf="b3", n_in=5 * BS, n_out=0), 1.0, HeldView(100, {}, {}))
    for k in range(2):
        s.observe(ev.WorkflowEnded(2.0, f"b{k}", "b"))
    assert s.peak_running.get("b") == 60                  # b2 ran in the burst and is open
    # a would span 51 of 100 beside b's 10 cached + 60 peak: held (both want more than half: 50)
    assert s.defer(call, 2.0, HeldView(100, {"a": 47}, {"a": 47, "b": 10}))
    s.observe(ev.WorkflowEnded(3.0, "b2", "b"))
    assert s.peak_running.get("b") == 5                   # only b3's admission is left
    assert not s.defer(call, 3.0, HeldView(100, {"a": 47}, {"a": 47, "b": 10}))   # 51 <= 100 - 15


def test_max_min_share_examples():
    from agentrt.sched.maxmin import share_of_unbounded
    assert share_of_unbounded(100, 1, []) == 100
    assert share_of_unbounded(100, 1, [(60, 1)]) == 50                    # both want more: half
    assert share_of_unbounded(100, 1, [(20, 1)]) == 80                    # the other keeps its 20
    assert share_of_unbounded(100, 1, [(1, 1)] * 10 + [(90, 1)]) == 45    # 10 tiny ones, then half each
    assert share_of_unbounded(100, 1, [(90, 3)]) == 25                    # by weight


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 500), st.integers(1, 4),
       st.lists(st.tuples(st.integers(0, 400), st.integers(1, 4)), max_size=10))
def test_max_min_share_is_water_filling(pool, w, others):
    from agentrt.sched.maxmin import share_of_unbounded
    share = share_of_unbounded(pool, w, others)
    total = w + sum(x for _, x in others)
    assert share >= pool * w / total - 1e-9                      # never below the static split
    assert share <= pool + 1e-9
    # the others keep min(demand, their weight at the same level); together with the share that
    # fills the pool exactly (the water-filling fixed point)
    level = share / w
    kept = sum(min(d, x * level) for d, x in others)
    assert abs(share + kept - pool) < 1e-6 * max(1, pool)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 40), min_size=1, max_size=8), st.integers(0, 40), st.integers(1, 4))
def test_shares_tiers_hold_their_invariants(small, big, w_big):
    held = {f"t{k}": n for k, n in enumerate(small)}
    held["big"] = big
    pool = max(1, sum(held.values()))
    pol = TenantShares(Policy(), {"big": float(w_big)})
    pol.attach(type("C", (), {"tenant_blocks": held, "tenant_reserved": {}, "gpu_capacity": pool})())
    pol.recheck()
    active = {t for t, n in held.items() if n > 0}
    weight = {t: (w_big if t == "big" else 1.0) for t in active}
    assert pol.beyond <= pol.over <= active
    if len(active) >= 2:
        for t in active:
            guarantee = pool * weight[t] / sum(weight.values())
            assert (t in pol.over) == (held[t] > guarantee)       # no hysteresis on a first check
    else:
        assert pol.over == set()
    # what the cache holds fits the pool, so the levels of the tenants over their guarantee add
    # up to at least what they hold: never all of them are over it; with two tenants none is
    assert not pol.over or pol.beyond < pol.over
    if len(active) <= 2:
        assert pol.beyond == set()


def _tiers_by_definition(blocks, reserved, inflight, pool, weights, hyst, was, was_beyond):
    """Tier membership written out from the module's definition, one tenant at a time (the
    re-check's first formulation): the reference the faster re-check must agree with."""
    active = {t for t, n in blocks.items() if n > 0} | set(inflight)
    if len(active) < 2:
        return set(), set()
    w = {t: weights.get(t, 1.0) for t in active}
    held = {t: blocks.get(t, 0) + reserved.get(t, 0) for t in active}

    def above(t, bound, prev):
        return held[t] > bound or (t in prev and held[t] > bound * (1.0 - hyst))
    over = {t for t in active if above(t, pool * w[t] / sum(w.values()), was)}
    beyond = set()
    if len(over) >= 2:
        rest = pool - sum(n for t, n in held.items() if t not in over)
        beyond = {t for t in over if above(t, rest * w[t] / sum(w[x] for x in over), was_beyond)}
    return over, beyond


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.dictionaries(st.sampled_from("abcdef"), st.integers(0, 30), max_size=6),
                          st.dictionaries(st.sampled_from("abcdefg"), st.integers(0, 8), max_size=4),
                          st.sets(st.sampled_from("abcdefgh"), max_size=3)),
                min_size=1, max_size=8),
       st.sampled_from([{}, {"a": 2.0}, {"b": 0.5, "c": 3.0}]), st.sampled_from([0.0, 0.05, 0.3]))
def test_recheck_agrees_with_the_definition_across_hysteresis(states, weights, hyst):
    pool = 60
    cache = type("C", (), {})()
    pol = TenantShares(Policy(), weights, hysteresis=hyst)
    pol.attach(cache)
    for blocks, reserved, inflight in states:
        cache.tenant_blocks, cache.tenant_reserved, cache.gpu_capacity = blocks, reserved, pool
        pol.inflight = dict.fromkeys(inflight, 1)
        want = _tiers_by_definition(blocks, reserved, inflight, pool, weights, hyst, pol.over, pol.beyond)
        pol.recheck()
        assert (pol.over, pol.beyond) == want


def test_shares_recheck_once_per_step_when_the_owner_says_so():
    """vLLM's connector re-checks once per scheduler step (`TenantLedger.refresh`), not per event."""
    held = {"a": 10, "b": 1}
    pol = TenantShares(Policy(), recheck_on_events=False)
    pol.attach(type("C", (), {"tenant_blocks": held, "tenant_reserved": {}, "gpu_capacity": 12})())
    pol.observe(ev.BlocksEvicted(1.0, [], False))
    assert pol.over == set()                       # events alone change nothing
    pol.recheck()
    assert pol.over == {"a"}


# ------------------------------------------------------------------ shares count running requests' blocks
def test_a_tenants_running_reservations_count_against_its_share():
    pol = TenantShares(Policy())
    cache = RadixKVCache(20, 0, pol, block_bytes=1)
    pol.attach(cache)
    fill(cache, "quiet", [1, 2, 3, 4], 0.0)
    fill(cache, "flood", [100, 101, 102], 1.0)
    pol.observe(ev.BlocksEvicted(1.0, [], False))
    assert pol.over == set()                       # 3 cached blocks: well within half the pool
    # a running flood request reserving 9 more blocks (its prompt to compute, its outputs)
    lease = cache.acquire("flood", [200, 201, 202, 203, 204, 205], 6, 3, 2.0)
    assert cache.tenant_reserved["flood"] == 9 and not cache.tenant_reserved.get("quiet")
    pol.observe(ev.BlocksEvicted(2.0, [], False))
    assert pol.over == {"flood"}                   # 3 + 9 = 12 > 10
    # so the flood's own unlocked cache goes before the quiet tenant's older blocks
    assert cache.peek_victims(1)[0].tenant == "flood"
    cache.commit_prompt(lease, 3.0)
    cache.release(lease)
    assert cache.tenant_reserved["flood"] == 0
    cache.check_invariants()


# ------------------------------------------------------------------ bounded chunks while tenants share
def live(s, tenant, rid, wf):
    s.observe(ev.CallArrived(0.0, info(rid, tenant, wf=wf)))


def test_prefill_cap_holds_back_all_but_the_least_served_tenant():
    s = make_scheduler("fair", shared_chunk_tokens=1024)
    assert s.prefill_cap("a", 8000) == 8000                 # nobody is open: no cap
    live(s, "b", 1, "b/w")
    assert s.prefill_cap("b", 8000) == 8000                 # one tenant alone: no cap
    live(s, "b", 2, "b/w")
    live(s, "a", 3, "a/w")                                  # a re-enters at the system's time
    assert s.virtual["a"] < s.virtual["b"]
    assert s.prefill_cap("a", 8000) == 8000                 # a is the least served
    assert s.prefill_cap("b", 8000) == 1024
    assert s.prefill_cap("b", 500) == 500                   # never more than the engine's budget
    # b's workflows end: a alone again
    s.observe(ev.WorkflowEnded(5.0, "b/w", "b"))
    assert s.prefill_cap("a", 8000) == 8000


def test_prefill_cap_zero_turns_it_off_and_bad_values_are_refused():
    import pytest
    s = make_scheduler("fair", shared_chunk_tokens=0)
    live(s, "a", 1, "a/w")
    live(s, "b", 2, "b/w")
    assert s.prefill_cap("a", 8000) == s.prefill_cap("b", 8000) == 8000
    for bad in (-1, 1.5, True, "2048"):
        with pytest.raises(AgentrtError, match="shared_chunk_tokens"):
            make_scheduler("fair", shared_chunk_tokens=bad)
    assert make_scheduler("lpm").prefill_cap("a", 300) == 300


def test_in_the_simulator_a_quiet_call_waits_out_a_capped_iteration_not_a_full_budget():
    """b prefills a 60,000-token prompt while a's workflow is open (its first call ran at 0 s); a's
    second call arrives at 0.5 s. Without the cap it waits out b's current 8,192-token iteration
    and shares the next with b; with it, b's iterations hold at most 2,048 of b's tokens."""
    big = [10_000 + j for j in range(60_000 // BS)]
    calls = [Call(workflow="a/w", call=0, input_length=4 * BS, output_length=2, hash_ids=[1, 2, 3, 4],
                  timestamp=0.0, after=(), last=False, tenant="a"),
             Call(workflow="b/w", call=0, input_length=60_000, output_length=2, hash_ids=big,
                  timestamp=0.0, after=(), last=True, tenant="b"),
             Call(workflow="a/w", call=1, input_length=8 * BS, output_length=2, hash_ids=[1, 2, 3, 4, 5, 6, 7, 8],
                  timestamp=0.5, after=(0,), last=True, tenant="a")]
    ttft, b_ttft = {}, {}
    for cap in (0, 2048):
        cfg = EngineConfig(preset=PRESET, block_size=BS, gpu_blocks=20_000)
        sim = Simulator(cfg, make_policy("lru"), iter(calls), scheduler=make_scheduler("fair", shared_chunk_tokens=cap))
        m = sim.run()
        ttft[cap] = m.tenants["a"].ttft[1]
        b_ttft[cap] = m.tenants["b"].ttft[0]
    cost = Simulator(EngineConfig(preset=PRESET, block_size=BS, gpu_blocks=20_000), make_policy("lru"), iter(())).cost
    capped = cost.prefill(2048 + 8 * BS, 60_000)           # the longest iteration b may run now
    assert ttft[2048] <= 2 * capped
    assert ttft[0] > 2 * capped
    # what b pays: the per-iteration overhead of running its prompt in more, shorter iterations
    assert b_ttft[0] <= b_ttft[2048] <= 1.05 * b_ttft[0]


def test_the_least_served_tenant_prefills_first_until_it_is_served_more():
    s = FairScheduler()                                   # cap on (default): precedence on
    b1, b2 = info(1, "b", n_in=1000 * BS), info(2, "b", n_in=1000 * BS)
    admit(s, b1)
    admit(s, b2)
    a1, a2 = info(3, "a", n_in=10 * BS), info(4, "a", n_in=10 * BS)
    admit(s, a1, now=1.0)
    admit(s, a2, now=1.0)
    assert s.least() == "a" and s.virtual["a"] < s.virtual["b"]
    running = [(b1, 0.0, 600 * BS), (b2, 0.0, 1000 * BS), (a2, 1.0, 10 * BS), (a1, 1.0, 10 * BS)]
    # both of a's calls go ahead of b1, whose next token the fair order alone would tag first
    assert batch_order(s, running) == [3, 4, 1, 2]
    assert s.prefill_cap("a", 8000) == 8000 and s.prefill_cap("b", 8000) == 512
    # a sends far more than b: it loses precedence and the cap
    for k in range(5):
        admit(s, info(10 + k, "a", n_in=1000 * BS), now=2.0)
    assert s.least() == "b"
    assert batch_order(s, running) == [1, 2, 3, 4]
    assert s.prefill_cap("a", 8000) == 512 and s.prefill_cap("b", 8000) == 8000


# ------------------------------------------------------------------ bounded state: tenants that left
def departures(s, n, start=0):
    for i in range(start, start + n):
        c = info(i, f"t{i}", wf=f"w{i}")
        s.observe(ev.CallArrived(float(i), c))
        s.observe(ev.CallAdmitted(float(i), c, None, 1, 0))
        s.observe(ev.CallFinished(i + 0.5, c, None))
        s.observe(ev.WorkflowEnded(i + 0.6, f"w{i}", f"t{i}"))


def test_tenants_that_left_do_not_grow_fairs_state():
    s = FairScheduler()
    departures(s, 20000)
    assert len(s.virtual) <= 128 and len(s.prefill.clock) <= 128 and len(s._gone) <= 128
    assert s.state_bytes() < 50_000


def test_a_tenant_that_took_more_than_its_share_keeps_its_clock_after_leaving():
    s = FairScheduler()
    busy = info(1, "busy", wf="b1", n_in=100 * BS)
    s.observe(ev.CallArrived(0.0, busy))
    s.observe(ev.CallArrived(0.0, info(2, "quiet", wf="q1")))     # stays in flight: the floor
    s.observe(ev.CallFinished(1.0, busy, None))
    s.observe(ev.WorkflowEnded(1.0, "b1", "busy"))
    departures(s, 200, start=100)                                   # sweeps run
    assert s.virtual["busy"] > min(s.tags.values())                 # its debt is kept
    again = info(3, "busy", wf="b2")
    s.observe(ev.CallArrived(2.0, again))
    assert s.tags[3] == s.virtual["busy"] - (again.input_length + again.output_length)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(1, 40), st.booleans()), min_size=1, max_size=120))
def test_dropping_clocks_of_tenants_that_left_changes_no_tag(steps):
    # the same events to a scheduler that sweeps at once and to one that never does: every start
    # tag, prefill tag and the precedence agree
    eager, never = FairScheduler(), FairScheduler()
    never._sweep_at = 10**9

    def feed(e):
        eager._sweep_at = 1                                         # sweep at every departure
        eager.observe(e)
        never.observe(e)

    open_calls: dict[int, ev.CallInfo] = {}
    rid = 0
    for k, (tenant, blocks, finish_first) in enumerate(steps):
        t = float(k)
        if finish_first and open_calls:
            old = open_calls.pop(min(open_calls))
            feed(ev.CallFinished(t, old, None))
            feed(ev.WorkflowEnded(t, old.workflow, old.tenant))
        rid += 1
        c = info(rid, f"t{tenant}", wf=f"w{rid}", n_in=blocks * BS)
        feed(ev.CallArrived(t, c))
        feed(ev.CallAdmitted(t, c, None, blocks // 2, 0))
        open_calls[rid] = c
        assert eager.tags == never.tags
        for r, call in open_calls.items():
            assert eager.prefill.tag(r, call.tenant, BS) == never.prefill.tag(r, call.tenant, BS)
        if len(eager.live) > 1:
            assert eager.least() == never.least()

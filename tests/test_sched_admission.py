"""The admission contract of schedulers in the simulator (`engine/admission.py`, `Preemption.victim`):
- `fcfs` is exactly the engine without a scheduler;
- under every reordering scheduler every call is served and the cache invariants hold;
- backfill past a blocked call only takes free blocks: it never evicts;
- `max_wait_s` bounds the wait of a call that `las` or `agent` would starve;
- preemption under a reordering scheduler takes the lowest-ranked running request;
- `CacheQueueView.cached_blocks` (incremental) equals a fresh match of the cache."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrt.engine.presets import get_preset
from agentrt.engine.request import WAITING
from agentrt.engine.simulator import EngineConfig, Simulator
from agentrt.policies.registry import make_policy
from agentrt.sched.base import Scheduler
from agentrt.sched.registry import make_scheduler, scheduler_names
from agentrt.trace.schema import Call
from agentrt.workloads.base import GenConfig
from agentrt.workloads.registry import get_workload
from test_sim_preemption import checked

PRESET = get_preset("llama3.1-8b-h100")
BS = 16
WALL_CLOCK = ("wall_s", "touches_per_s")
REORDERING = [n for n in scheduler_names() if n != "fcfs"]


def call(wf, i, ids, n_in=None, n_out=4, ts=None, after=None, think=0.0, last=True, tenant="default",
         agent=None, out_ids=()):
    return Call(workflow=wf, call=i, input_length=n_in or BS * len(ids), output_length=n_out,
                hash_ids=list(ids), timestamp=ts, think_ms=think,
                after=tuple(after) if after is not None else ((i - 1,) if i else ()), last=last,
                tenant=tenant, agent=agent, output_hash_ids=list(out_ids))


def sim_of(calls, gpu_blocks, scheduler=None, policy="lru", concurrency=None, host_blocks=0,
           max_running=256, record_stream=True, **kw):
    cfg = EngineConfig(preset=PRESET, block_size=BS, gpu_blocks=gpu_blocks, host_blocks=host_blocks,
                       max_running=max_running, **kw)
    return Simulator(cfg, make_policy(policy), iter(calls), concurrency=concurrency,
                     record_stream=record_stream, scheduler=scheduler)


def finish(sim, n_calls):
    m = sim.run()
    sim.cache.check_invariants()
    assert not sim.running and not sim.waiting
    assert sim.cache.reserved == 0 and sim.cache.locked_gpu == 0
    assert m.calls == n_calls and len(m.ttft) == n_calls and len(m.queue_wait) == n_calls
    assert all(w >= 0 for w in m.queue_wait)
    return m


def summary(m):
    return {k: v for k, v in m.summary().items() if k not in WALL_CLOCK}


_WORKLOADS: dict = {}


def workload(name="mix", workflows=30, seed=1, concurrency=8):
    key = (name, workflows, seed, concurrency)
    if key not in _WORKLOADS:
        _WORKLOADS[key] = list(get_workload(name).generate(
            GenConfig(workflows=workflows, seed=seed, concurrency=concurrency)))
    return _WORKLOADS[key]


# ------------------------------------------------------------------ fcfs is the default
@pytest.mark.parametrize("policy, host", [("lru", 0), ("kvflow", 1500), ("pbkv-lae", 0)])
def test_fcfs_gives_exactly_the_metrics_of_no_scheduler(policy, host):
    calls = workload()
    runs = []
    for sched in (None, Scheduler(), make_scheduler("fcfs", max_wait_s=1e-6)):
        sim = sim_of(calls, 800, sched, policy=policy, concurrency=8, host_blocks=host)
        m = finish(sim, len(calls))
        runs.append((summary(m), sim.admitted, list(m.queue_wait), list(m.ttft)))
    assert runs[0][0]["evictions"] > 0 and runs[0][0]["wait_max_s"] > 0     # a contended replay
    for r in runs[1:]:
        assert r == runs[0]


def test_summary_has_the_new_latency_fields():
    calls = workload()
    m = finish(sim_of(calls, 800, concurrency=8), len(calls))
    s = m.summary()
    assert s["wait_max_s"] == max(m.queue_wait) and s["wait_max_s"] >= s["wait_p99_s"] > 0
    assert s["wait_mean_s"] == pytest.approx(sum(m.queue_wait) / len(m.queue_wait))
    assert s["ttft_p50_s"] <= s["ttft_p90_s"] <= s["ttft_p99_s"]
    assert s["e2e_p50_s"] <= s["e2e_p99_s"]
    assert s["ttft_p50_s"] == pytest.approx(sorted(m.ttft)[len(m.ttft) // 2], rel=0.5)


# ------------------------------------------------------------------ every call is served
@pytest.mark.parametrize("name", REORDERING)
@pytest.mark.parametrize("policy, host, max_wait", [("lru", 0, 60.0), ("kvflow", 1500, 60.0),
                                                    ("pbkv-lae", 0, 0.05)])
def test_reordering_schedulers_serve_every_call_with_invariants(name, policy, host, max_wait):
    calls = workload()
    sim = checked(sim_of(calls, 800, make_scheduler(name, max_wait_s=max_wait), policy=policy,
                         concurrency=8, host_blocks=host))
    m = finish(sim, len(calls))
    assert m.workflows == 30
    assert m.prompt_tokens == sum(c.input_length for c in calls)
    assert m.output_tokens == sum(c.output_length for c in calls)
    assert m.gpu_hit_tokens + m.host_hit_tokens + m.prefill_tokens == m.prompt_tokens
    assert sorted(sim.admitted) == sorted((c.workflow, c.call) for c in calls)


@settings(max_examples=60, deadline=None)
@given(data=st.data(), gpu=st.integers(4, 14), host=st.sampled_from([0, 0, 6]),
       budget=st.sampled_from([16, 40, 8192]), conc=st.sampled_from([None, 1, 3]),
       policy=st.sampled_from(["lru", "pbkv-lae", "cachesage"]), name=st.sampled_from(REORDERING),
       max_wait=st.sampled_from([60.0, 0.01]), max_running=st.sampled_from([256, 2]),
       cache_at=st.sampled_from(["prefill", "schedule"]))
def test_random_small_workloads_finish_under_every_scheduler(data, gpu, host, budget, conc, policy, name,
                                                             max_wait, max_running, cache_at):
    calls = []
    n_wf = data.draw(st.integers(1, 5))
    starts = sorted(data.draw(st.lists(st.integers(0, 50), min_size=n_wf, max_size=n_wf)))
    for w in range(n_wf):
        n_calls = data.draw(st.integers(1, 3))
        tenant = data.draw(st.sampled_from(["a", "b"]))
        ids: list[int] = [data.draw(st.integers(1, 3))]
        for i in range(n_calls):
            ids = ids + [1000 * (w + 1) + 10 * i + k for k in range(data.draw(st.integers(0, 3)))]
            n_in = BS * len(ids) - data.draw(st.integers(0, BS - 1))
            n_out = data.draw(st.integers(0, 70))
            most = (n_in + n_out) // BS - n_in // BS
            out = [100_000 * (w + 1) + 100 * i + k for k in range(data.draw(st.integers(0, most)))]
            calls.append(call(f"w{w}", i, ids, n_in=n_in, n_out=n_out, ts=starts[w] if i == 0 else None,
                              last=i == n_calls - 1, out_ids=out, agent=f"g{i % 2}", tenant=tenant))
    sched = make_scheduler(name, max_wait_s=max_wait)
    sim = checked(sim_of(calls, gpu, sched, policy=policy, concurrency=conc, host_blocks=host,
                         max_batch_tokens=budget, max_running=max_running, cache_at=cache_at))
    AdmissionMonitor(sim)            # no backfill evicts (see below)
    m = finish(sim, len(calls))
    assert m.workflows == n_wf
    assert m.prompt_tokens == sum(c.input_length for c in calls)
    assert m.output_tokens == sum(c.output_length for c in calls)
    assert m.gpu_hit_tokens + m.host_hit_tokens + m.prefill_tokens == m.prompt_tokens


# ------------------------------------------------------------------ backfill never evicts
class AdmissionMonitor:
    """Wraps `Admission.admit` and `cache.acquire`: within one admission pass, every acquire after the
    first refused one is a backfill; it must not evict and must fit in the free blocks."""

    def __init__(self, sim):
        self.sim = sim
        self.backfills = 0
        self.blocked_passes = 0
        self.in_pass = False
        self.refused = False
        self.held_back = 0      # skipped behind a blocked call although evicting would have fit it
        admission = sim.admission
        admit, acquire, fits_free = admission.admit, sim.cache.acquire, admission._fits_free

        def wrapped_fits_free(r):
            ok = fits_free(r)
            cache = sim.cache
            gpu, _ = cache.match(r.info.tenant, r.hash_ids, r.n_full)
            need = r.n_full - gpu + r.extra_blocks
            assert ok == (need <= cache.free)
            if not ok and cache._fits(cache.root(r.info.tenant), r.hash_ids, r.n_full, r.extra_blocks):
                self.held_back += 1
            return ok

        def wrapped_admit(*args):
            self.in_pass, self.refused = True, False
            try:
                admit(*args)
            finally:
                self.blocked_passes += self.refused
                self.in_pass = False

        def wrapped_acquire(tenant, hash_ids, n_full, extra, now):
            cache = sim.cache
            before = cache.evictions
            gpu, host = cache.match(tenant, hash_ids, n_full)
            free = cache.free
            lease = acquire(tenant, hash_ids, n_full, extra, now)
            if self.in_pass:
                if lease is None:
                    self.refused = True
                elif self.refused:
                    self.backfills += 1
                    assert cache.evictions == before, "a backfilled call evicted cache"
                    assert n_full - gpu + extra <= free
            return lease

        admission.admit = wrapped_admit
        sim.cache.acquire = wrapped_acquire
        admission._fits_free = wrapped_fits_free


def agent_holding_whatever_does_not_fit():
    """`agent` with the working-set rule alone (`overcommit.py` always says hold): it keeps the
    pool below full, so there are free blocks to backfill into. The cost rule admits more and
    leaves almost none, so it rarely backfills at all."""
    from agentrt.sched.overcommit import OvercommitCost

    class AlwaysHold(OvercommitCost):
        def worth_holding(self, *args) -> bool:
            return True
    s = make_scheduler("agent")
    s.overcommit = AlwaysHold()
    return s


@pytest.mark.parametrize("name, gpu, conc", [("agent", 500, 8), ("agent", 400, 32), ("fair", 1000, 16),
                                             ("fair", 400, 32)])
def test_backfill_never_evicts_on_a_contended_workload(name, gpu, conc):
    calls = workload(workflows=40, concurrency=conc)
    sched = agent_holding_whatever_does_not_fit() if name == "agent" else make_scheduler(name)
    sim = sim_of(calls, gpu, sched, concurrency=conc)
    mon = AdmissionMonitor(sim)
    finish(sim, len(calls))
    # the rule was exercised: calls were backfilled, others held back that eviction would have fit
    assert mon.blocked_passes > 0 and mon.backfills > 0 and mon.held_back > 0


def test_schedulers_without_backfill_stop_at_the_first_refusal():
    calls = workload()
    for name in ("fcfs", "lpm", "las"):
        sim = sim_of(calls, 500, make_scheduler(name), concurrency=8)
        mon = AdmissionMonitor(sim)
        finish(sim, len(calls))
        assert mon.blocked_passes > 0 and mon.backfills == 0, name


def blocked_head_trace():
    """11 GPU blocks. w0 leaves its 3-block prompt cached; r runs (5 blocks); then h (w0's prompt
    plus 6 blocks: 7 new blocks, more than free + evictable) is blocked until r ends. Behind it,
    c (4 cold blocks) fits only by evicting h's cached prefix; d (1 block) fits in free blocks."""
    return [call("w0", 0, [50, 51, 52], n_out=1, ts=0),
            call("r", 0, [1, 2, 3, 4], n_out=10, ts=100),
            call("h", 0, [50, 51, 52] + list(range(53, 59)), n_out=1, ts=101),
            call("c", 0, [90, 91, 92], n_out=1, ts=102),
            call("d", 0, [], n_in=5, n_out=3, ts=103)]


def admission_order(sched, gpu=11):
    calls = blocked_head_trace()
    sim = checked(sim_of(calls, gpu, sched))
    evictions_at = {}
    acquire = sim.cache.acquire

    def acquire_logged(tenant, hash_ids, n_full, extra, now):
        evictions_at.setdefault(tuple(hash_ids[:n_full]), sim.cache.evictions)
        return acquire(tenant, hash_ids, n_full, extra, now)
    sim.cache.acquire = acquire_logged
    m = finish(sim, len(calls))
    return [wf for wf, _ in sim.admitted], evictions_at, m


def test_a_blocked_head_is_not_robbed_of_its_cache():
    order, evictions_at, m = admission_order(make_scheduler("fair"))
    # d is backfilled into a free block; c is not, since it would evict h's prefix
    assert order == ["w0", "r", "d", "h", "c"]
    h_ids = (50, 51, 52) + tuple(range(53, 59))
    assert evictions_at[h_ids] == 0                   # nothing was evicted before h's admission
    assert m.gpu_hit_tokens == 3 * BS                 # h hit its prefix
    # fcfs: the blocked head blocks everything behind it
    order, _, m = admission_order(None)
    assert order == ["w0", "r", "h", "c", "d"] and m.gpu_hit_tokens == 3 * BS


def test_nothing_is_backfilled_past_an_aged_call():
    # with a 1 ms bound, h has aged by the time d arrives: d waits behind h and then c
    order, _, m = admission_order(make_scheduler("fair", max_wait_s=0.001))
    assert order == ["w0", "r", "h", "c", "d"]
    assert m.gpu_hit_tokens == 3 * BS


# ------------------------------------------------------------------ the starvation bound
def starving_trace(n_short=40, period_ms=150):
    """A two-call workflow L and a steady stream of one-call workflows, one running at a time
    (max_running 1) at about the rate they are served. L's second call has attained service
    (las) and a larger expected remainder (agent) than every fresh call: both starve it."""
    calls = [call("L", 0, [1, 2, 3, 4], n_out=20, ts=0, last=False),
             call("L", 1, [1, 2, 3, 4, 5, 6], n_out=20, last=True)]
    for k in range(n_short):
        calls.append(call(f"S{k}", 0, [1000 + 10 * k + j for j in range(4)], n_out=20, ts=5 + period_ms * k))
    return calls


def waits(name, max_wait_s):
    calls = starving_trace()
    sim = sim_of(calls, 200, make_scheduler(name, max_wait_s=max_wait_s), max_running=1)
    m = finish(sim, len(calls))
    per_call = dict(zip(sim.admitted, m.queue_wait))
    return per_call[("L", 1)], m.summary()["wait_max_s"], m


@pytest.mark.parametrize("name", ["las", "agent"])
def test_max_wait_bounds_the_wait_of_a_starved_call(name):
    # one call here is served in about 0.14 s (max_running 1)
    starved, worst, _ = waits(name, 1e9)
    fcfs_worst = waits("fcfs", 60.0)[1]
    assert starved == worst > 1.5 > 4 * fcfs_worst      # without aging L's second call starves
    for bound in (0.2, 0.5):
        starved_aged, worst_aged, _ = waits(name, bound)
        assert starved_aged <= bound + 0.3, (bound, starved_aged)
        assert worst_aged <= bound + 0.3 < worst / 2, (bound, worst_aged)


def test_aging_keeps_every_call_bounded_under_lpm():
    # lpm: the warm call (a long shared prefix) goes first; a cold call waits for the stream of
    # warm ones to dry up unless it ages
    prefix = list(range(1, 9))
    calls = [call("cold", 0, [500, 501, 502, 503], n_out=20, ts=3)]
    for k in range(40):
        calls.append(call(f"warm{k}", 0, prefix + [1000 + k], n_out=20, ts=100 * k))
    calls.sort(key=lambda c: c.timestamp)

    def cold_wait(max_wait_s):
        sim = sim_of(calls, 400, make_scheduler("lpm", max_wait_s=max_wait_s), max_running=1)
        m = finish(sim, len(calls))
        return dict(zip(sim.admitted, m.queue_wait))[("cold", 0)]

    starved = cold_wait(1e9)
    assert starved > 1.5
    assert cold_wait(0.3) <= 0.3 + 0.3 < starved


# ------------------------------------------------------------------ preemption victims
class _NowView:
    """What FCFS ranking needs of a view (it reads no cache)."""
    now = 0.0

    def cached_blocks(self, call):
        raise AssertionError("fcfs read the cache")


class VictimMonitor:
    """Records each victim with the ranks of every running request holding memory at that moment."""

    def __init__(self, sim):
        self.log = []
        victim = sim.preemption.victim

        def wrapped(now):
            v = victim(now)
            if v is not None:
                view = sim.preemption.view if sim.preemption.view is not None else _NowView()
                view.now = now
                held = [r for r in sim.running if r.lease is not None and r.state != WAITING]
                ranks = {r.info.rid: sim.sched.rank(r.info, r.arrival, view) for r in held}
                admitted_order = [r.info.rid for r in held]
                self.log.append((v.info.rid, v.info.workflow, ranks, admitted_order))
            return v
        sim.preemption.victim = wrapped


def preemption_trace():
    # a: a 3-block prompt, admitted first; b: a 1-block prompt. Both decode 64 tokens in 8 blocks.
    return [call("a", 0, [1, 2, 3], n_out=64, ts=0, out_ids=[11, 12, 13, 14]),
            call("b", 0, [5], n_out=64, ts=0, out_ids=[15, 16, 17, 18])]


def victims(sched):
    calls = preemption_trace()
    sim = checked(sim_of(calls, 8, sched))
    mon = VictimMonitor(sim)
    m = finish(sim, len(calls))
    assert m.preemptions >= 1
    return mon.log


def test_fcfs_preempts_the_latest_admitted():
    log = victims(None)
    assert log[0][1] == "b"
    assert all(rid == order[-1] for rid, _, _, order in log)


def test_las_preempts_the_workflow_with_the_most_service():
    # a has attained 48 tokens of prefill, b 16: under las a ranks last and is preempted, although
    # it was admitted first
    log = victims(make_scheduler("las"))
    assert log[0][1] == "a"
    for rid, _, ranks, _ in log:
        assert ranks[rid] == max(ranks.values())


@pytest.mark.parametrize("name", REORDERING)
def test_the_victim_is_always_the_lowest_ranked_running_request(name):
    calls = workload()
    sim = sim_of(calls, 300, make_scheduler(name), concurrency=8)
    mon = VictimMonitor(sim)
    m = finish(sim, len(calls))
    assert m.preemptions > 0 and mon.log
    for rid, _, ranks, _ in mon.log:
        assert ranks[rid] == max(ranks.values())


def test_aged_running_requests_are_preempted_last():
    # with a tiny bound, both requests have aged by the time memory runs out: the rank is arrival
    # order again, so the later arrival (b, rid 2) goes even under las
    calls = [call("a", 0, [1, 2, 3], n_out=64, ts=0, out_ids=[11, 12, 13, 14]),
             call("b", 0, [5], n_out=64, ts=1, out_ids=[15, 16, 17, 18])]
    sim = checked(sim_of(calls, 8, make_scheduler("las", max_wait_s=1e-6)))
    mon = VictimMonitor(sim)
    finish(sim, len(calls))
    assert mon.log[0][1] == "b"


# ------------------------------------------------------------------ the incremental queue view
def test_cache_queue_view_matches_a_fresh_match_throughout_a_replay():
    calls = workload()
    sim = sim_of(calls, 500, make_scheduler("lpm"), concurrency=8)
    seen = {"n": 0, "warm": 0}
    inner = sim.admission.view

    class Checking:
        """The simulator's view, each answer checked against a fresh `match`."""
        def __getattr__(self, item):
            return getattr(inner, item)

        def __setattr__(self, item, value):
            setattr(inner, item, value)

        def cached_blocks(self, c):
            got = inner.cached_blocks(c)
            gpu, _ = sim.cache.match(c.tenant, c.hash_ids, c.n_full)
            assert got == gpu, (c.rid, got, gpu)
            seen["n"] += 1
            seen["warm"] += got > 0
            return got

    sim.admission.view = sim.preemption.view = Checking()
    finish(sim, len(calls))
    assert seen["n"] > 100 and seen["warm"] > 0


def test_the_view_shows_the_engine_load_and_prefill_cost_the_agent_hold_weighs():
    """`requests` and `prefill_seconds` (read by `agent`'s workflow admission, `overcommit.py`)
    are the engine's: its running and waiting requests when asked, its cost model's prefill."""
    from agentrt.sched.overcommit import OvercommitCost
    calls = workload(workflows=40, concurrency=16)
    sim = sim_of(calls, 400, make_scheduler("agent"), concurrency=16)
    asked = []

    class Checking(OvercommitCost):
        def worth_holding(self, cls, own, live, free, bs, view) -> bool:
            assert view.requests == len(sim.running) + len(sim.waiting) >= 1
            assert view.prefill_seconds(own * bs) == sim.cost.prefill(own * bs, 0) > 0
            asked.append(view.requests)
            return super().worth_holding(cls, own, live, free, bs, view)
    sim.sched.overcommit = Checking()
    finish(sim, len(calls))
    assert asked and sim.admission.view.prefill_seconds(0) == 0.0

"""The runtime's LRU safety net (`runtime/safety_net.py`) and its sampled shadow LRU
(`runtime/shadow_lru.py`): the shadow is an LRU with the engine's locks; the net switches on
evidence, only reorders, and stays out of LRU and the bounds."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from agentrt.cache import RadixKVCache
from agentrt.runtime import events as ev
from agentrt.runtime.actions import Prefetch
from agentrt.runtime.policy import Policy
from agentrt.runtime.runtime import AgentRuntime
from agentrt.runtime.safety_net import FALLBACK, MIN_HOLD, POLICY, PROBE, NetConfig, SafetyNet
from agentrt.runtime.shadow_lru import ShadowLRU


def _info(rid, ids, agent="a"):
    return ev.CallInfo(rid=rid, workflow="w", agent=agent, tenant="t", index=rid, hash_ids=ids,
                       input_length=len(ids) * 16, output_length=1, block_size=16)


class ReferenceLRU:
    """LRU over keys with pins, written the slow obvious way."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.order: list[int] = []      # least recent first
        self.pins: dict[int, int] = {}

    def touch(self, keys: list[int]) -> None:
        for k in reversed(keys):
            if k in self.order:
                self.order.remove(k)
            self.order.append(k)

    def trim(self) -> None:
        i = 0
        while len(self.order) > self.cap and i < len(self.order):
            if self.pins.get(self.order[i]):
                i += 1
            else:
                self.order.pop(i)


calls = st.lists(st.tuples(st.lists(st.integers(0, 2), min_size=1, max_size=5), st.integers(0, 2)),
                 min_size=1, max_size=30)


def chained(choices: list[int]) -> list[int]:
    """Hash ids of a path in a small tree: id i stands for the whole prefix up to i, as chained
    block hashes do."""
    return [hash(tuple(choices[:i + 1])) & ((1 << 63) - 1) for i in range(len(choices))]


@settings(max_examples=150, deadline=None)
@given(calls, st.integers(2, 8), st.integers(1, 3))
def test_shadow_at_full_rate_is_an_lru_with_locks(seq, cap, overlap):
    """Calls admitted in waves of `overlap`, each pinning its prompt until it finishes; every
    hit and every key held agrees with a plain LRU that skips pinned keys."""
    sh = ShadowLRU(lambda: cap, target=4096)            # rate 1: every key sampled
    ref = ReferenceLRU(cap)
    keys = {}
    for start in range(0, len(seq), overlap):
        wave = list(enumerate(seq[start:start + overlap], start))
        for rid, (path, agent) in wave:
            prompt = chained(path)
            keys[rid] = sh.sampler.keys_of("t", prompt)
            want = 0
            for k in keys[rid]:
                if k not in ref.order:
                    break
                want += 1
            n, _, shadow = sh.admitted(_info(rid, prompt, agent=str(agent)), 0)
            assert (n, shadow) == (len(prompt), want)
            for k in keys[rid]:
                ref.pins[k] = ref.pins.get(k, 0) + 1
            sh.trim()
            ref.trim()
            assert set(sh.touch) == set(ref.order)
        for rid, (path, _) in wave:
            sh.finished(_info(rid, chained(path)), None)
            ref.touch(keys[rid])
            for k in keys[rid]:
                ref.pins[k] -= 1
            ref.trim()
            assert set(sh.touch) == set(ref.order)
    assert not sh.pins and not sh.calls


def test_shadow_halves_its_rate_to_stay_near_its_target():
    sh = ShadowLRU(lambda: 10**6, target=64)
    for rid in range(40):
        info = _info(rid, list(range(rid * 50, rid * 50 + 50)))
        sh.admitted(info, 0)
        sh.prompt_cached(rid)
        sh.finished(info, None)
    assert sh.rate < 1.0 and len(sh.touch) <= 2 * 64
    assert all(k < sh.sampler.threshold for k in sh.touch)
    # tenants sample different keys for the same hash ids
    assert sh.sampler.keys_of("a", list(range(5000))) != sh.sampler.keys_of("b", list(range(5000)))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 120), st.integers(0, 40), st.integers(0, 3)), min_size=1,
                max_size=12),
       st.integers(0, 3))
def test_a_threads_next_prompt_reuses_its_sampled_prefix(prompts, bits):
    """Chained ids: prompts that share a prefix share its ids up to where they part; the sampled
    blocks found by reusing the previous prompt (of which only every MARK-th id is kept) are
    those a fresh scan finds."""
    from agentrt.runtime.key_sampler import MARK, KeySampler
    s, fresh = KeySampler(), KeySampler()
    for _ in range(bits):
        s.halve()
        fresh.halve()
    base: list[int] = []
    for i, (keep, add, partial) in enumerate(prompts):
        # a prompt that keeps `keep` blocks of the last one and adds `add` new ones (chained ids),
        # of which the first n are full blocks
        ids = base[:keep] + [1000 * (i + 1) + j for j in range(add + 1)]
        n = max(0, len(ids) - partial)
        got = s.prompt("t", "w", "a", ids, n)
        pos, keys = [], []
        fresh.sample("t", ids, 0, n, pos, keys)
        assert (got.pos, got.keys) == (pos, keys)
        assert got.marks == ids[0:n:MARK]
        base = ids


# ------------------------------------------------------------------ the switching rule
class Fixed(Policy):
    name = "fixed"
    dynamic = True

    def score(self, block):
        return (7, block.last_touch)


def fresh(rid: int) -> list[int]:
    """A prompt nobody read before: both caches miss it."""
    return list(range(1000 * rid, 1000 * rid + 20))


def _feed(net, rid, ids, gpu_hit, now):
    info = _info(rid, ids)
    net.observe(ev.CallAdmitted(now, info, None, gpu_hit, 0))
    net.observe(ev.PromptCached(now, info, None, len(ids) - gpu_hit))
    net.observe(ev.CallFinished(now, info, None))


def test_net_falls_back_while_the_policy_loses_and_returns_when_it_does_not():
    pol = Fixed()
    net = SafetyNet(pol, NetConfig(), cached=lambda: 1000)
    block = SimpleNamespace(last_touch=42)
    ids = list(range(20))
    rid = 0
    assert net.score(block) == (7, 42) and net.mode == POLICY
    # the same prompt again and again: LRU keeps it, the "policy" never hits
    while net.mode == POLICY:
        rid += 1
        _feed(net, rid, ids, 0, float(rid))
        assert rid < 500
    assert net.mode == FALLBACK and net.fallbacks == 1
    e0 = net.epoch
    assert net.score(block) == 42                     # LRU order while it loses
    pol.epoch += 5                                    # the policy's bumps do not re-rank LRU keys
    assert net.epoch == e0
    # in fallback the real cache is LRU: it misses what the shadow misses (new prompts turn the
    # cache over: the net's clock), and the net probes again
    while net.mode == FALLBACK:
        rid += 1
        _feed(net, rid, fresh(rid), 0, float(rid))
    assert net.mode == PROBE and net.probes == 1 and net.score(block) == (7, 42)
    # losing again doubles the next hold
    while net.mode == PROBE:
        rid += 1
        _feed(net, rid, ids, 0, float(rid))
    assert net.mode == FALLBACK and net.hold_halves == 8
    while net.mode == FALLBACK:
        rid += 1
        _feed(net, rid, fresh(rid), 0, float(rid))
    # the policy now misses only what LRU misses: back in control; the hold halves only after a
    # long stretch without losing (4 x hold half-lives of turnover)
    while net.mode == PROBE:
        rid += 1
        _feed(net, rid, fresh(rid), 0, float(rid))
    assert net.mode == POLICY and net.hold_halves == 8
    for _ in range(2000):
        rid += 1
        _feed(net, rid, fresh(rid), 0, float(rid))
    assert net.mode == POLICY and net.hold_halves == MIN_HOLD
    st_ = net.stats()
    assert st_["net_fallbacks"] == 2 and st_["net_probes"] == 2 and st_["net_fallback_s"] > 0


def test_fallback_drops_a_prefetch_eviction_bound_and_keeps_tenant_tiers():
    from agentrt.sched.kvshare import TenantShares
    pol = TenantShares(Fixed())
    net = SafetyNet(pol, cached=lambda: 100)
    net.mode = FALLBACK
    acts = net.actions([Prefetch("t", None, 4, (1,), "x")])
    assert acts[0].evict_below is None
    pol.over = {"t"}
    assert net.score(SimpleNamespace(tenant="t", last_touch=3)) == (1, 3)
    assert net.score(SimpleNamespace(tenant="u", last_touch=3)) == (2, 3)


def test_no_net_for_lru_for_bounds_or_when_off():
    from agentrt.policies.registry import make_policy
    assert AgentRuntime(make_policy("lru")).net is None
    rt = AgentRuntime(make_policy("pbkv-lae"))
    assert rt.net is not None and rt.ranker is rt.net and rt.wants_events
    assert AgentRuntime(make_policy("pbkv-lae"), safety_net=False).ranker.name == "pbkv-lae"
    assert AgentRuntime(make_policy("pbkv-lae"), safety_net=NetConfig(enabled=False)).net is None

    class Bound(Fixed):
        safety_net = False
    assert AgentRuntime(Bound()).net is None
    # without the engine's count of cached blocks the net sees nothing and ranks as the policy
    net = AgentRuntime(Fixed()).net
    _feed(net, 1, [1, 2, 3], 0, 0.0)
    assert net.sampled == 0 and net.score(SimpleNamespace(last_touch=1)) == (7, 1)
    with pytest.raises(ValueError):
        NetConfig(margin=-0.1)


# ------------------------------------------------------------------ it only reorders
class Random(Policy):
    """Keys that change on every epoch, an order nothing like LRU's, and of another kind than LRU's
    (tuples against ints: a switch leaves keys of both kinds in the heap until it re-ranks)."""
    name = "random-keys"
    dynamic = True

    def score(self, block):
        return (hash((block.hash, block.depth, self.epoch)) % 97,)


class NetCacheMachine(RuleBasedStateMachine):
    """Random admissions, commits and releases on a cache ranked through the safety net, forced
    between its modes: every eviction takes an unlocked GPU leaf and the cache's invariants hold,
    whatever the mode."""

    @initialize(gpu=st.integers(2, 14))
    def setup(self, gpu):
        self.policy = Random()
        self.net = SafetyNet(self.policy, cached=lambda: self.cache.gpu_used)
        self.cache = RadixKVCache(gpu, policy=self.net)
        self.cache.on_evict = self._evicted
        self.running = []
        self.admitted = []
        self.now = 0.0

    def _evicted(self, blocks, demoted):
        for b in blocks:
            assert b.lock_ref == 0 and b.gpu_children == 0

    @rule(ids=st.lists(st.integers(0, 3), min_size=1, max_size=5), extra=st.integers(0, 2))
    def acquire(self, ids, extra):
        self.now += 1
        lease = self.cache.acquire("t", ids, len(ids), extra, self.now)
        if lease is not None:
            self.admitted.append(lease)

    @precondition(lambda self: self.admitted)
    @rule(i=st.integers(0, 50))
    def commit(self, i):
        lease = self.admitted.pop(i % len(self.admitted))
        self.cache.commit_prompt(lease, self.now)
        self.running.append(lease)

    @precondition(lambda self: self.running)
    @rule(i=st.integers(0, 50))
    def release(self, i):
        self.cache.release(self.running.pop(i % len(self.running)), (), self.now)

    @rule(mode=st.sampled_from([POLICY, FALLBACK, PROBE]), bump=st.booleans())
    def switch(self, mode, bump):
        if bump:
            self.policy.epoch += 1
        if mode != self.net.mode:
            self.net._switch(mode, self.now)

    @precondition(lambda self: self.running)
    @rule(i=st.integers(0, 50))
    def switch_then_release(self, i):
        """As in an engine: the net switches while observing a finish, and the call's release
        pushes keys of the new kind into a heap still holding the old kind."""
        self.net._switch(FALLBACK if self.net.mode != FALLBACK else PROBE, self.now)
        self.cache.release(self.running.pop(i % len(self.running)), (), self.now)

    @rule(n=st.integers(1, 3))
    def evict(self, n):
        locked = {id(b) for b in self._blocks() if b.lock_ref}
        self.cache.evict(n)
        assert locked <= {id(b) for b in self._blocks()}

    def _blocks(self):
        out, stack = [], list(self.cache.roots.values())
        while stack:
            b = stack.pop()
            out.append(b)
            stack.extend(b.children.values())
        return out

    @invariant()
    def consistent(self):
        if hasattr(self, "cache"):
            self.cache.check_invariants()
            for b in self.cache.peek_victims(4):
                assert b.lock_ref == 0 and b.gpu_children == 0


TestNetOnlyReorders = NetCacheMachine.TestCase
TestNetOnlyReorders.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)

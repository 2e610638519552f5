"""Offline bounds: exact small cases, optimality against brute force, and the ordering
lru <= belady <= infinite on many random traces replayed by the simulator."""

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from agentrt.bounds.offline import belady_bound, infinite_bound
from agentrt.engine.presets import get_preset
from agentrt.engine.simulator import EngineConfig, Simulator
from agentrt.policies.lru import LRUPolicy
from agentrt.trace.schema import Call

BS = 4


def P(*ids, n=None):
    """A prompt reference: full blocks `ids`, input length one token past them (a partial block)."""
    return ("t", list(ids), n if n is not None else BS * len(ids) + 1, True)


def test_infinite_counts_prefix_hits_only():
    s = [P(1, 2, 3), P(1, 2, 4), P(9, 2, 3)]
    r = infinite_bound(s, BS)
    assert r.hit_tokens == 2 * BS and r.prompt_tokens == 3 * (3 * BS + 1)


def test_belady_keeps_what_is_used_next():
    # capacity 2: after A,B the cache keeps the blocks used soonest
    s = [P(1), P(2), P(3), P(1), P(3), P(2)]
    # after 3 arrives it keeps 1 and 3 (next used at once) and drops 2: hits on 1 and 3
    assert belady_bound(s, BS, 2).hit_tokens == 2 * BS
    assert infinite_bound(s, BS).hit_tokens == 3 * BS


def test_belady_bypasses_blocks_never_used_again():
    s = [P(1), P(2), P(1), P(3), P(1)]
    assert belady_bound(s, BS, 1).hit_tokens == 2 * BS


def test_fully_cached_prompt_still_computes_its_last_token():
    s = [P(1, 2, n=2 * BS), P(1, 2, n=2 * BS)]
    assert infinite_bound(s, BS).hit_tokens == 2 * BS - 1


def brute_force(stream, cap):
    """Best hits over every keep-set choice after every reference (prefix hits only)."""
    best = 0

    def rec(i, cached, hits):
        nonlocal best
        if i == len(stream):
            best = max(best, hits)
            return
        _, ids, n, is_prompt = stream[i]
        h = 0
        if is_prompt:
            for b in ids:
                if b not in cached:
                    break
                h += 1
            h = min(h * BS, n - 1)
        pool = sorted(set(cached) | set(ids))
        for k in range(min(cap, len(pool)), -1, -1):
            for keep in itertools.combinations(pool, k):
                rec(i + 1, frozenset(keep), hits + h)

    rec(0, frozenset(), 0)
    return best


chains = st.lists(st.lists(st.integers(0, 2), min_size=1, max_size=3), min_size=1, max_size=5)


@settings(max_examples=60, deadline=None)
@given(chains, st.integers(1, 3))
def test_belady_is_optimal_on_tiny_streams(paths, cap):
    # chained ids: a block is named by its whole prefix, as trace hash ids are
    stream = [("t", [hash(tuple(p[:i + 1])) for i in range(len(p))], BS * len(p) + 1, True) for p in paths]
    assert belady_bound(stream, BS, cap).hit_tokens == brute_force(stream, cap)


@st.composite
def traces(draw):
    """Random agent-like workflows: a few shared system prompts, growing per-workflow histories."""
    n_wf = draw(st.integers(1, 8))
    calls = []
    for w in range(n_wf):
        t0 = draw(st.integers(0, 3000))
        history: dict[str, list[int]] = {}
        for i in range(draw(st.integers(1, 5))):
            agent = draw(st.sampled_from(["a", "b", "c"]))
            prefix = history.get(agent) or [1000 + ord(agent) * 10 + k for k in range(draw(st.integers(1, 3)))]
            grow = [hash((w, i, k)) % 10**9 for k in range(draw(st.integers(1, 4)))]
            ids = prefix + grow
            history[agent] = ids
            n_in = len(ids) * BS - draw(st.integers(0, BS - 1))
            calls.append(Call(workflow=f"w{w}", call=i, input_length=n_in,
                              output_length=draw(st.integers(0, 40)), hash_ids=ids, agent=agent,
                              timestamp=float(t0) if i == 0 else None,
                              after=(i - 1,) if i else (), think_ms=float(draw(st.integers(0, 500))),
                              last=None))
        calls[-1].last = True
    calls.sort(key=lambda c: (int(c.workflow[1:]),))
    return calls


@settings(max_examples=80, deadline=None)
@given(traces(), st.integers(4, 40))
def test_lru_below_belady_below_infinite(calls, gpu_blocks):
    cfg = EngineConfig(preset=get_preset("llama3.1-8b-h100"), block_size=BS, gpu_blocks=gpu_blocks)
    sim = Simulator(cfg, LRUPolicy(), iter(calls), record_stream=True)
    m = sim.run()
    bel = belady_bound(sim.stream, BS, gpu_blocks)
    inf = infinite_bound(sim.stream, BS)
    assert bel.prompt_tokens == inf.prompt_tokens == m.prompt_tokens
    non_oversize_hits = m.gpu_hit_tokens
    assert non_oversize_hits <= bel.hit_tokens <= inf.hit_tokens

"""Offline bounds: exact small cases, optimality against brute force (MIN, and MIN with held
blocks), and the ordering lru <= belady-held <= belady <= infinite on many random traces
replayed by the simulator."""

import itertools

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from agentrt.bounds.held import held_belady_bound
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


def prompt_hits(ids, n, is_prompt, cached) -> int:
    """Tokens a reference hits: a prompt's leading cached blocks, capped at n - 1 tokens."""
    if not is_prompt:
        return 0
    h = 0
    for b in ids:
        if b not in cached:
            break
        h += 1
    return min(h * BS, n - 1)


def brute_force(stream, cap):
    """Best hits over every keep-set choice after every reference (prefix hits only)."""
    return held_brute_force(stream, [], cap)


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
def test_lru_below_belady_held_below_belady_below_infinite(calls, gpu_blocks):
    cfg = EngineConfig(preset=get_preset("llama3.1-8b-h100"), block_size=BS, gpu_blocks=gpu_blocks)
    sim = Simulator(cfg, LRUPolicy(), iter(calls), record_stream=True)
    m = sim.run()
    held = held_belady_bound(sim.stream, sim.holds, BS, gpu_blocks)
    bel = belady_bound(sim.stream, BS, gpu_blocks)
    inf = infinite_bound(sim.stream, BS)
    assert held.prompt_tokens == bel.prompt_tokens == inf.prompt_tokens == m.prompt_tokens
    non_oversize_hits = m.gpu_hit_tokens
    assert non_oversize_hits <= held.hit_tokens <= bel.hit_tokens <= inf.hit_tokens


@settings(max_examples=40, deadline=None)
@given(traces(), st.integers(4, 40))
def test_the_oracle_stays_below_belady_held_on_its_own_stream(calls, gpu_blocks):
    """belady-held bounds the run it was computed from. The oracle's run orders calls its own way
    (its hits shorten prefills), so it can pass the bound of LRU's stream (the regime sweep shows
    it by up to 0.6 points) but never the bound of its own."""
    from agentrt.policies.oracle import FutureUses, OraclePolicy
    cfg = EngineConfig(preset=get_preset("llama3.1-8b-h100"), block_size=BS, gpu_blocks=gpu_blocks)
    lru = Simulator(cfg, LRUPolicy(), iter(calls), record_stream=True)
    lru.run()
    oracle = Simulator(cfg, OraclePolicy(FutureUses(calls, lru.admitted, BS)), iter(calls), record_stream=True)
    m = oracle.run()
    assert m.gpu_hit_tokens <= held_belady_bound(oracle.stream, oracle.holds, BS, gpu_blocks).hit_tokens


# ---------------------------------------------------------------- belady-held (bounds/held.py)

def held_brute_force(stream, holds, cap):
    """Best hits over every keep-set that contains the held blocks, after every reference."""
    best = 0

    def rec(i, cached, held, hits):
        nonlocal best
        if i == len(stream):
            best = max(best, hits)
            return
        _, ids, n, is_prompt = stream[i]
        h = prompt_hits(ids, n, is_prompt, cached)
        held = dict(held)
        for pos, key, sign, _, hashes in holds:
            if pos == i:
                held[key] = list(hashes) if sign > 0 else []
        must = {b for bs in held.values() for b in bs}
        pool = sorted(set(cached) | set(ids) | must)
        free = [b for b in pool if b not in must]
        room = max(cap - len(must), 0)
        for k in range(min(room, len(free)), -1, -1):
            for keep in itertools.combinations(free, k):
                rec(i + 1, frozenset(keep) | must, held, hits + h)

    rec(0, frozenset(), {}, 0)
    return best


@st.composite
def held_streams(draw):
    paths = draw(chains)
    stream = [("t", [hash(tuple(p[:i + 1])) for i in range(len(p))], BS * len(p) + 1, True) for p in paths]
    ends = [draw(st.integers(i, len(stream) - 1)) for i in range(len(stream))]
    holds = []
    for pos in range(len(stream)):
        holds.append((pos, pos, 1, "t", stream[pos][1]))
        holds += [(pos, k, -1, None, None) for k in range(pos + 1) if ends[k] == pos]
    return stream, holds


@settings(max_examples=60, deadline=None)
@given(held_streams(), st.integers(1, 4))
def test_belady_held_is_optimal_on_tiny_streams(stream_holds, cap):
    stream, holds = stream_holds
    held: dict = {}
    for _, key, sign, _, hashes in holds:            # as in an engine: what is held fits
        held[key] = set(hashes) if sign > 0 else set()
        assume(len(set().union(*held.values())) <= cap)
    got = held_belady_bound(stream, holds, BS, cap).hit_tokens
    assert got == held_brute_force(stream, holds, cap)
    assert got <= belady_bound(stream, BS, cap).hit_tokens


def test_belady_held_without_holds_is_belady():
    s = [P(1), P(2), P(3), P(1), P(3), P(2)]
    assert held_belady_bound(s, [], BS, 2).hit_tokens == belady_bound(s, BS, 2).hit_tokens


def test_a_held_block_is_not_dropped_for_one_used_sooner():
    # capacity 1: block 1 is held by its call until after the third reference, so 2 cannot stay
    # for the third (MIN keeps it for the third and the fourth)
    s = [P(1), P(2), P(2), P(2)]
    holds = [(0, "a", 1, "t", [1]), (2, "a", -1, None, None)]
    assert belady_bound(s, BS, 1).hit_tokens == 2 * BS
    assert held_belady_bound(s, holds, BS, 1).hit_tokens == BS


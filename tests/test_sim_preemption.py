"""Incremental output allocation, preemption by recompute and output-block tags, in tiny exact
configurations (a handful of 16-token blocks), plus random small workloads (under policies that
prefetch and warm up too, with blocks shared after the prefill or when scheduled) that must always finish with every cache invariant holding after every
iteration."""

from hypothesis import given, settings
from hypothesis import strategies as st

from agentrt.cache import GPU
from agentrt.engine.presets import get_preset
from agentrt.engine.simulator import EngineConfig, Simulator
from agentrt.policies.pbkv import PBKVLAEPolicy
from agentrt.policies.registry import make_policy
from agentrt.runtime import events as ev
from agentrt.runtime.policy import Policy
from agentrt.trace.schema import Call

PRESET = get_preset("llama3.1-8b-h100")
BS = 16


def call(wf, i, ids, n_in=None, n_out=4, ts=None, after=None, think=0.0, last=None, agent=None, out_ids=()):
    return Call(workflow=wf, call=i, input_length=n_in or BS * len(ids), output_length=n_out,
                hash_ids=list(ids), agent=agent, timestamp=ts, think_ms=think,
                after=tuple(after) if after is not None else ((i - 1,) if i else ()),
                last=last, output_hash_ids=list(out_ids))


class Recorder(Policy):
    """LRU that logs the events the runtime forwards."""
    wants_events = True

    def __init__(self):
        super().__init__()
        self.log = []

    def observe(self, e):
        t = type(e)
        if t is ev.CallAdmitted:
            self.log.append(("admitted", e.call.workflow, e.gpu_hit, e.host_hit, e.call.extra.get("resumed")))
        elif t is ev.CallArrived:
            self.log.append(("arrived", e.call.workflow))
        elif t is ev.CallFinished:
            self.log.append(("finished", e.call.workflow))
        elif t is ev.PromptCached:
            self.log.append(("cached", e.call.workflow))
        elif t is ev.BlocksEvicted:
            self.log.append(("evicted", [b.hash for b in e.blocks]))


def checked(sim):
    """Check the cache and the engine's block accounting at the start of every iteration."""
    pop = sim.replay.pop_arrivals

    def hook(now):
        cache = sim.cache
        cache.check_invariants()
        assert cache.free >= 0
        held = [r for r in sim.running if r.lease is not None]
        assert sum(r.lease.reserved for r in held) == cache.reserved
        for r in held:
            assert r.lease.reserved >= 0
            assert all(b.tier == GPU and b.lock_ref > 0 for b in r.lease.node.path())
        return pop(now)

    sim.replay.pop_arrivals = hook
    return sim


def simulate(calls, gpu_blocks, policy=None, **kw):
    cfg = EngineConfig(preset=PRESET, block_size=BS, gpu_blocks=gpu_blocks, **kw)
    policy = policy if policy is not None else Recorder()
    sim = checked(Simulator(cfg, policy, iter(calls)))
    m = sim.run()
    sim.cache.check_invariants()
    assert sim.cache.reserved == 0 and sim.cache.locked_gpu == 0
    return sim, m, getattr(policy, "log", None)


def test_admission_reserves_the_prompt_not_the_output():
    # prompt 2 blocks + the first token's block: 3 of 4 blocks, where the whole output needed 4
    sim, m, log = simulate([call("a", 0, [1, 2], n_out=20, ts=0, last=True, out_ids=[3]),
                            call("b", 0, [5], n_out=0, ts=0, last=True)], gpu_blocks=4)
    assert log[:4] == [("arrived", "a"), ("arrived", "b"), ("admitted", "a", 0, 0, None),
                       ("admitted", "b", 0, 0, None)]     # b is admitted beside a at once
    assert m.preemptions == 0 and m.calls == 2


def test_output_growth_evicts_an_unlocked_block_first():
    calls = [call("x", 0, [9], n_out=0, ts=0, last=True),
             call("a", 0, [1, 2], n_out=20, ts=1000, last=True, out_ids=[3])]
    sim, m, log = simulate(calls, gpu_blocks=4)
    # x's block stays cached through a's admission (3 blocks, 3 free) and goes when a's output
    # reaches its 4th block (context 48), not a preemption
    assert log.index(("evicted", [9])) > log.index(("cached", "a"))
    assert m.evictions == 1 and m.preemptions == 0 and m.recompute_tokens == 0
    assert m.output_tokens == 20 and m.calls == 2


def test_preemption_requeues_the_latest_admitted_and_recomputes():
    calls = [call("a", 0, [1, 2], n_out=64, ts=0, last=True, out_ids=[11, 12, 13, 14]),
             call("b", 0, [5, 6], n_out=64, ts=0, last=True, out_ids=[15, 16, 17, 18]),
             call("c", 0, [7, 8], n_out=8, ts=0, last=True)]
    sim, m, log = simulate(calls, gpu_blocks=8)
    # a and b take 3 blocks each, then one more each at context 48: 8 of 8. At context 64 a needs
    # a 5th: nothing is free or evictable, so b (the latest admitted) is preempted. Its two
    # prompt and two completed output blocks stay cached, unlocked: a's growth evicts 16 then 15.
    assert log.count(("arrived", "b")) == 1
    assert [e for e in log if e[0] == "admitted"] == [
        ("admitted", "a", 0, 0, None), ("admitted", "b", 0, 0, None),
        ("admitted", "b", 2, 0, 1),            # re-queued ahead of c: prefix hits on 5, 6
        ("admitted", "c", 0, 0, None)]
    assert ("evicted", [16]) in log and ("evicted", [15]) in log
    assert log.index(("admitted", "b", 2, 0, 1)) > log.index(("finished", "a"))
    assert m.preemptions == 1
    assert m.recompute_tokens == 64 - 32       # 64 tokens in its KV, 2 blocks hit on return
    # the user-facing counts are those of the first admissions
    assert m.prompt_tokens == 96 and m.gpu_hit_tokens == 0 and m.prefill_tokens == 96
    assert len(m.ttft) == 3 and m.ttft[0] == m.ttft[1]     # b's first token came before
    assert m.output_tokens == 136 and m.calls == 3 and m.workflows == 3
    s = m.summary()
    assert s["preemptions"] == 1 and s["recompute_tokens"] == 32 and s["hit_rate"] == 0.0


def test_a_preempted_prefill_keeps_its_completed_chunks():
    # a: 28-token prompt, decoding; b: 6-block prompt prefilled 16 tokens per iteration beside it
    calls = [call("a", 0, [1, 2], n_in=28, n_out=40, ts=0, last=True, out_ids=[31, 32, 33]),
             call("b", 0, [21, 22, 23, 24, 25, 26], n_out=1, ts=1, last=True)]
    sim, m, log = simulate(calls, gpu_blocks=9, max_batch_tokens=17)
    # a's prefill takes 17 + 11 tokens, b's chunks fill the rest of each budget: 6, 16, 16, 16.
    # a holds 2 blocks, b 7 (9 of 9): when a's context reaches 32, b has computed 54 tokens. It is
    # preempted, its 3 full blocks enter the cache, and it comes back (after a, as it no longer
    # fits beside it) hitting them: only the 6 tokens past them are computed again
    admitted = [e for e in log if e[0] == "admitted"]
    assert admitted == [("admitted", "a", 0, 0, None), ("admitted", "b", 0, 0, None),
                        ("admitted", "b", 3, 0, 1)]
    assert m.preemptions == 1 and m.recompute_tokens == 6
    # a grew to 5 blocks beside b's 3 cached ones without evicting; b's return (4 more blocks)
    # evicted a's last two output blocks
    assert [e for e in log if e[0] == "evicted"] == [("evicted", [33, 32])]
    assert m.prompt_tokens == 124 and m.prefill_tokens == 124 and m.gpu_hit_tokens == 0
    assert len(m.ttft) == 2                      # b's first token only after it came back
    assert m.ttft[1] > sim.now - 1.0 and m.calls == 2


def test_a_request_preempted_while_loading_keeps_its_loaded_blocks():
    x, y = list(range(1000, 1200)), list(range(2000, 2200))
    calls = [call("x", 0, x, n_out=0, ts=0, last=True),
             call("y", 0, y, n_out=0, ts=1000, last=True),          # pushes 198 of x's to the host
             call("a", 0, [1, 2], n_in=30, n_out=40, ts=2000, last=True),
             call("z", 0, x + [7], n_out=1, ts=2004, last=True)]     # 198 host blocks: ~8 ms of PCIe
    sim, m, log = simulate(calls, gpu_blocks=204, host_blocks=400)
    events = [e for e in log if e[0] != "evicted"]
    # a reaches context 32 while z still loads: nothing is free or evictable, z is preempted; its
    # loaded blocks stay in the tree (one goes back to the host for a's block) and are hit again
    assert events[-6:] == [("arrived", "z"), ("admitted", "z", 2, 198, None), ("finished", "a"),
                           ("admitted", "z", 199, 1, 1), ("cached", "z"), ("finished", "z")]
    assert m.preemptions == 1 and m.recompute_tokens == 0
    assert m.h2d_bytes == 199 * BS * PRESET.model.kv_bytes_per_token
    assert m.host_hit_tokens == 198 * BS and len(m.ttft) == 4


class Snapshot(PBKVLAEPolicy):
    """PBKV-LAE that looks at the cache when the live workflow's third call arrives."""

    def __init__(self):
        super().__init__()
        self.cache = None
        self.seen = None

    def observe(self, e):
        super().observe(e)
        if type(e) is ev.CallArrived and e.call.workflow == "w" and e.call.index == 2:
            blocks = {}
            stack = [self.cache.roots["default"]]
            while stack:
                for b in stack.pop().children.values():
                    blocks[b.hash] = b
                    stack.append(b)
            self.seen = ({h: self.retired(b) for h, b in blocks.items()},
                         [b.hash for b in self.cache.peek_victims(3)])


def test_output_blocks_carry_their_thread_tag_under_pbkv_lae():
    calls = [call("x", 0, [9], n_out=0, ts=0, last=True),                       # ends: retired
             call("w", 0, [1, 2], n_out=0, ts=0, agent="a"),
             call("w", 1, [5, 6], n_out=32, agent="b", out_ids=[7, 8]),
             call("w", 2, [1, 2, 4], n_out=0, agent="a", think=60_000, last=True)]
    p = Snapshot()
    cfg = EngineConfig(preset=PRESET, block_size=BS, gpu_blocks=100)
    sim = Simulator(cfg, p, iter(calls))
    p.cache = sim.cache
    sim.run()
    retired, victims = p.seen
    assert retired[7] is False and retired[8] is False      # output blocks of a live workflow
    assert retired[9] is True
    # retired first, then the live workflow's leaves by recency: a's older prompt before b's output
    assert victims == [9, 2, 8]


@settings(max_examples=60, deadline=None)
@given(data=st.data(), gpu=st.integers(4, 14), host=st.sampled_from([0, 0, 6]),
       budget=st.sampled_from([16, 40, 8192]), conc=st.sampled_from([None, 1, 3]),
       policy=st.sampled_from(["lru", "pbkv-lae", "cachesage", "pbkv-aggressive", "ttl"]),
       cache_at=st.sampled_from(["prefill", "schedule"]))
def test_random_small_workloads_always_finish(data, gpu, host, budget, conc, policy, cache_at):
    calls = []
    n_wf = data.draw(st.integers(1, 4))
    starts = sorted(data.draw(st.lists(st.integers(0, 50), min_size=n_wf, max_size=n_wf)))
    for w in range(n_wf):
        n_calls = data.draw(st.integers(1, 3))
        ids: list[int] = [data.draw(st.integers(1, 3))]         # first blocks shared across workflows
        for i in range(n_calls):
            ids = ids + [1000 * (w + 1) + 10 * i + k for k in range(data.draw(st.integers(0, 3)))]
            n_in = BS * len(ids) - data.draw(st.integers(0, BS - 1))
            n_out = data.draw(st.integers(0, 70))
            most = (n_in + n_out) // BS - n_in // BS
            out = [100_000 * (w + 1) + 100 * i + k for k in range(data.draw(st.integers(0, most)))]
            calls.append(call(f"w{w}", i, ids, n_in=n_in, n_out=n_out, ts=starts[w] if i == 0 else None,
                              last=i == n_calls - 1, out_ids=out, agent=f"g{i % 2}"))
    cfg = EngineConfig(preset=PRESET, block_size=BS, gpu_blocks=gpu, host_blocks=host,
                       max_batch_tokens=budget, cache_at=cache_at)
    sim = checked(Simulator(cfg, make_policy(policy), iter(calls), concurrency=conc))
    m = sim.run()
    sim.cache.check_invariants()
    assert not sim.running and not sim.waiting
    assert sim.cache.reserved == 0 and sim.cache.locked_gpu == 0
    assert m.calls == len(calls) and m.workflows == n_wf
    assert len(m.ttft) == len(calls)                        # one first token per call, never two
    assert m.prompt_tokens == sum(c.input_length for c in calls)
    assert m.output_tokens == sum(c.output_length for c in calls)
    assert m.gpu_hit_tokens + m.host_hit_tokens + m.prefill_tokens == m.prompt_tokens
    assert m.recompute_tokens >= 0 and (m.preemptions > 0 or m.recompute_tokens == 0)

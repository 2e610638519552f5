"""The contract every registered policy must keep, run against each one (cachetools-style mixin)."""

import random

import pytest

from agentrt.engine.presets import get_preset
from agentrt.engine.simulator import EngineConfig, Simulator
from agentrt.policies.registry import BOUNDS, make_policy, policy_names, policy_class
from agentrt.runtime import events as ev
from agentrt.runtime.runtime import AgentRuntime
from agentrt.trace.schema import Call

POLICIES = [p for p in policy_names() if p not in BOUNDS]
BS = 16


def agent_trace(seed: int, workflows: int = 30, tenants=("default",), agents=("plan", "code", "test"),
                explicit_agents: bool = True) -> list[Call]:
    """Workflows of agents with shared system prompts and growing threads, some tool think time."""
    rng = random.Random(seed)
    calls = []
    next_id = [10_000]

    def fresh(n):
        ids = list(range(next_id[0], next_id[0] + n))
        next_id[0] += n
        return ids

    system = {a: [hash((a, k)) % 10_000 for k in range(rng.randint(4, 10))] for a in agents}
    for w in range(workflows):
        tenant = rng.choice(tenants)
        threads = {}
        n = rng.randint(2, 7)
        for i in range(n):
            a = rng.choice(agents)
            ids = threads.get(a, system[a]) + fresh(rng.randint(1, 8))
            threads[a] = ids
            calls.append(Call(workflow=f"w{w}", call=i, input_length=len(ids) * BS - rng.randint(0, BS - 1),
                              output_length=rng.randint(1, 40), hash_ids=ids,
                              agent=a if explicit_agents else None,
                              timestamp=float(w * 300) if i == 0 else None, after=(i - 1,) if i else (),
                              think_ms=float(rng.choice([0, 0, 500, 3000])), last=(i == n - 1),
                              tenant=tenant))
    return calls


def simulate(policy_name, calls, gpu_blocks=60, host_blocks=0, train=None, **opts):
    policy = make_policy(policy_name, **opts)
    if policy.needs_training:
        policy.train(iter(train if train is not None else calls), BS)
    cfg = EngineConfig(preset=get_preset("llama3.1-8b-h100"), block_size=BS, gpu_blocks=gpu_blocks,
                       host_blocks=host_blocks)
    sim = Simulator(cfg, policy, iter(calls))
    violations = []
    inner = sim.cache.on_evict

    def check(blocks, demoted):
        violations.extend(b for b in blocks if b.lock_ref)
        if inner is not None:
            inner(blocks, demoted)

    sim.cache.on_evict = check
    m = sim.run()
    return sim, m, violations


@pytest.mark.parametrize("name", POLICIES)
@pytest.mark.parametrize("host_blocks", [0, 80])
def test_never_evicts_a_locked_block(name, host_blocks):
    for seed in range(3):
        sim, m, violations = simulate(name, agent_trace(seed), host_blocks=host_blocks)
        assert violations == []
        sim.cache.check_invariants()
        assert m.calls == len(agent_trace(seed))
        assert sim.cache.locked_gpu == 0 and sim.cache.reserved == 0


@pytest.mark.parametrize("name", POLICIES)
def test_respects_tenant_isolation(name):
    calls = agent_trace(1, tenants=("a", "b"))
    sim, m, _ = simulate(name, calls, gpu_blocks=10_000)
    for tenant, root in sim.cache.roots.items():
        stack = [root]
        while stack:
            n = stack.pop()
            assert n.tenant == tenant
            stack.extend(n.children.values())
    # the same prompts under another tenant hit nothing of the first tenant's
    twin = [Call(**{**{f: getattr(c, f) for f in c.__slots__}, "tenant": "other", "workflow": "x" + c.workflow})
            for c in calls[:1]]
    sim2, m2, _ = simulate(name, calls[:1] + twin, gpu_blocks=10_000)
    assert m2.gpu_hit_tokens == 0


@pytest.mark.parametrize("name", POLICIES)
def test_deterministic_given_a_seed(name):
    def run():
        _, m, _ = simulate(name, agent_trace(7), host_blocks=40, seed=3)
        s = m.summary()
        s.pop("wall_s"), s.pop("touches_per_s")
        return s
    assert run() == run()


@pytest.mark.parametrize("name", POLICIES)
def test_handles_unknown_agents_and_workflows(name):
    calls = agent_trace(2, explicit_agents=False)
    sim, m, _ = simulate(name, calls)
    assert m.calls == len(calls)
    rt = sim.runtime
    policy = rt.policy
    info = ev.CallInfo(rid=10**9, workflow="never-seen", agent=None, tenant="default", index=5,
                       hash_ids=[1, 2], input_length=32, output_length=1, block_size=BS)
    rt.observe(ev.CallFinished(1e6, info, None, True))          # finish without an arrival
    rt.observe(ev.WorkflowEnded(1e6, "never-seen", "default"))  # end of an unknown workflow
    rt.observe(ev.BlocksEvicted(1e6, [], False))
    policy.predict(3)
    root = sim.cache.roots.get("default")
    for b in list(root.children.values())[:5]:
        policy.score(b)


@pytest.mark.parametrize("name", POLICIES)
def test_state_is_bounded(name):
    def state_after(workflows):
        sim, _, _ = simulate(name, agent_trace(3, workflows=workflows), gpu_blocks=200)
        assert sim.runtime.workflows == {}          # every workflow ended and was dropped
        return sim.runtime.state_bytes()
    small, large = state_after(40), state_after(320)
    assert large <= 1.5 * small + 4096


@pytest.mark.parametrize("name", POLICIES)
def test_declares_itself(name):
    cls = policy_class(name)
    assert cls.name == name and cls.description
    rt = AgentRuntime(make_policy(name))
    assert rt.policy.runtime is rt


@pytest.mark.parametrize("host_blocks", [0, 80])
def test_pbkv_ta_with_tail_survival_keeps_the_contract(host_blocks):
    """The experimental option (off by default) under the same checks: no locked block evicted,
    invariants hold, and the replay is deterministic."""
    hits = []
    for _ in range(2):
        sim, m, violations = simulate("pbkv-ta", agent_trace(1), host_blocks=host_blocks, tails=True)
        assert violations == []
        sim.cache.check_invariants()
        assert m.calls == len(agent_trace(1)) and sim.cache.locked_gpu == 0
        hits.append(m.gpu_hit_tokens)
    assert hits[0] == hits[1]


@pytest.mark.parametrize("name,flag", [("pbkv-ta", "online"), ("pbkv-ta", "tails"),
                                       ("cachesage", "warmup"), ("kvflow", "prefetch")])
def test_a_flag_option_takes_a_bool_and_nothing_else(name, flag):
    """A config file's "false" (a string) must not switch a flag on: every policy built by name
    (bench, `agentrt serve`, the vLLM connector) refuses anything but true or false."""
    from agentrt.errors import AgentrtError
    from agentrt.options import policy_flag_names
    assert flag in policy_flag_names(name)
    for bad in ("false", 0, 1, None):
        with pytest.raises(AgentrtError, match=f"{flag} must be true or false"):
            make_policy(name, **{flag: bad})
    assert getattr(make_policy(name, **{flag: False}), flag) is False

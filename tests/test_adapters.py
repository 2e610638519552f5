"""Framework adapters: the examples in examples/ run their framework against the real `agentrt serve`
in front of a real vLLM, and the server sees the framework's agents and workflows: LangGraph's
node names and thread id, AG2's group-chat speakers and chat id. Needs the `frameworks` test
extra (langgraph, langchain-openai, ag2); each test skips with a reason without its framework.
"""

from __future__ import annotations

import os
import time

import pytest

pytest.importorskip("fastapi", reason="the serve extra is not installed (pip install -e '.[serve]')")
import httpx  # noqa: E402

from test_serve import MODEL, load_example, serve_factory, shared_upstream  # noqa: E402,F401
from vllm_support import requires_vllm  # noqa: E402


@pytest.fixture(scope="session")
def upstream(vllm_servers):
    return shared_upstream(vllm_servers)      # the same vLLM server as test_serve.py


def calls_of(server, workflow: str) -> list[dict]:
    recent = httpx.get(server.url + "/agentrt/state").json()["recent"]
    return [r for r in recent if r["workflow"] == workflow and not r["warmup"]]


@pytest.mark.slow
@requires_vllm
def test_langgraph_nodes_are_agents_and_the_thread_is_the_workflow(serve_factory):
    pytest.importorskip("langgraph", reason="langgraph is not installed (the frameworks test extra)")
    pytest.importorskip("langchain_openai", reason="langchain-openai is not installed (the frameworks test extra)")
    example = load_example("langgraph_agents")
    server = serve_factory("cachesage")
    thread = f"lg-{os.getpid()}-{time.time_ns()}"
    out = example.run(server.url + "/v1", MODEL, thread, "Write a function that adds two numbers.",
                      max_tokens=8)
    assert [n.split(":")[0] for n in out["notes"]] == ["planner", "coder", "reviewer"]
    calls = calls_of(server, thread)
    assert [c["agent"] for c in calls] == ["planner", "coder", "reviewer"]
    assert all(c["agent_source"] == "header" and c["workflow_source"] == "header" for c in calls)
    assert [c["end"] for c in calls] == [False, False, True] and all(c["status"] == 200 for c in calls)
    state = httpx.get(server.url + "/agentrt/state").json()
    assert thread not in [w["id"] for w in state["workflows"]]        # ended with the reviewer
    assert {"planner", "coder", "reviewer"} <= {a["agent"] for a in state["agents"]}


@pytest.mark.slow
@requires_vllm
def test_ag2_speakers_are_agents_and_the_chat_is_the_workflow(serve_factory):
    pytest.importorskip("autogen", reason="ag2 is not installed (the frameworks test extra)")
    example = load_example("ag2_groupchat")
    server = serve_factory("cachesage")
    chat_id = f"ag2-{os.getpid()}-{time.time_ns()}"
    messages = example.run_chat(server.url + "/v1", MODEL, chat_id, "Write a function that adds two numbers.",
                                rounds=4, max_tokens=8)
    speakers = [m.get("name") for m in messages]
    assert speakers == ["user", "planner", "coder", "reviewer"]
    calls = calls_of(server, chat_id)
    assert [c["agent"] for c in calls] == speakers[1:]                 # the user is no LLM agent
    assert all(c["agent_source"] == "header" and c["status"] == 200 for c in calls)
    state = httpx.get(server.url + "/agentrt/state").json()
    assert chat_id not in [w["id"] for w in state["workflows"]]       # ended by the example

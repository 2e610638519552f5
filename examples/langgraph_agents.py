"""LangGraph through `agentrt serve`: each node is an agent, each thread a workflow.

A three-node graph (planner -> coder -> reviewer) calls the model with LangChain's ChatOpenAI
pointed at `agentrt serve`. Every call carries the node name as X-Agent-Id and the graph's
thread id as X-Workflow-Id; the reviewer, the last node, also sends X-Workflow-End: true, so the
runtime learns that planner is followed by coder, coder by reviewer, and the workflow then ends.

Run (after `agentrt serve --upstream http://127.0.0.1:8001 --policy cachesage` on port 8000):
    pip install langgraph langchain-openai
    python examples/langgraph_agents.py --base-url http://127.0.0.1:8000/v1 --model MODEL --thread t1
"""

from __future__ import annotations

import argparse
from typing import TypedDict

from langchain_core.messages import HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, StateGraph

PROMPTS = {
    "planner": "You are the planner. Break the task into three short steps.",
    "coder": "You are the coder. Write the code for the plan you are given.",
    "reviewer": "You are the reviewer. Point out one problem in the code you are given.",
}


class State(TypedDict):
    task: str
    notes: list[str]


def agentrt_headers(config: RunnableConfig, last: bool = False) -> dict[str, str]:
    """Identity for `agentrt serve`: the running node is the agent, the thread the workflow."""
    headers = {"X-Agent-Id": config["metadata"]["langgraph_node"],
               "X-Workflow-Id": config["configurable"]["thread_id"]}
    if last:
        headers["X-Workflow-End"] = "true"
    return headers


def make_node(llm: ChatOpenAI, name: str, last: bool = False):
    def node(state: State, config: RunnableConfig) -> dict:
        messages = [SystemMessage(PROMPTS[name]),
                    HumanMessage("\n\n".join([state["task"], *state["notes"]]))]
        reply = llm.invoke(messages, extra_headers=agentrt_headers(config, last))
        return {"notes": [*state["notes"], f"{name}: {reply.content}"]}
    return node


def build_graph(base_url: str, model: str, max_tokens: int = 32):
    llm = ChatOpenAI(base_url=base_url, api_key="unused", model=model, temperature=0,
                     max_tokens=max_tokens)
    g = StateGraph(State)
    g.add_node("planner", make_node(llm, "planner"))
    g.add_node("coder", make_node(llm, "coder"))
    g.add_node("reviewer", make_node(llm, "reviewer", last=True))
    g.add_edge(START, "planner")
    g.add_edge("planner", "coder")
    g.add_edge("coder", "reviewer")
    g.add_edge("reviewer", END)
    return g.compile()


def run(base_url: str, model: str, thread: str, task: str, max_tokens: int = 32) -> State:
    graph = build_graph(base_url, model, max_tokens)
    return graph.invoke({"task": task, "notes": []}, {"configurable": {"thread_id": thread}})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-url", default="http://127.0.0.1:8000/v1")
    ap.add_argument("--model", required=True)
    ap.add_argument("--thread", default="thread-1")
    ap.add_argument("--task", default="Write a function that reverses a linked list.")
    args = ap.parse_args()
    for note in run(args.base_url, args.model, args.thread, args.task)["notes"]:
        print(note)


if __name__ == "__main__":
    main()

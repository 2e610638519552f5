"""AG2 (AutoGen) group chat through `agentrt serve`: each speaker is an agent, each chat a workflow.

Every assistant in the group chat gets its own `llm_config` whose OpenAI client sends
X-Agent-Id = the speaker's name and X-Workflow-Id = the chat's id, so the runtime sees who speaks
when, and which chat the turns belong to. Speakers take turns in round-robin order (no LLM call to
pick the next speaker). After the chat, the script tells the server the workflow ended with
POST /agentrt/workflows/{chat id}/end, since no single call knows in advance it is the last.

Run (after `agentrt serve --upstream http://127.0.0.1:8001 --policy cachesage` on port 8000):
    pip install "ag2[openai]"
    python examples/ag2_groupchat.py --base-url http://127.0.0.1:8000/v1 --model MODEL --chat c1
"""

from __future__ import annotations

import argparse
import urllib.request

from autogen import ConversableAgent, GroupChat, GroupChatManager

SPEAKERS = {
    "planner": "You are the planner. Break the task into three short steps.",
    "coder": "You are the coder. Write the code for the plan so far.",
    "reviewer": "You are the reviewer. Point out one problem in the code so far.",
}


def llm_config(base_url: str, model: str, agent: str, chat_id: str, max_tokens: int) -> dict:
    """One speaker's model config: its identity travels as default headers of its client."""
    return {"config_list": [{"model": model, "base_url": base_url, "api_key": "unused",
                             "default_headers": {"X-Agent-Id": agent, "X-Workflow-Id": chat_id},
                             "price": [0, 0]}],
            "temperature": 0, "max_tokens": max_tokens, "cache_seed": None}


def end_workflow(base_url: str, chat_id: str) -> None:
    root = base_url.rstrip("/").removesuffix("/v1")
    req = urllib.request.Request(f"{root}/agentrt/workflows/{chat_id}/end", data=b"", method="POST")
    urllib.request.urlopen(req, timeout=10).read()


def run_chat(base_url: str, model: str, chat_id: str, task: str, rounds: int = 4,
             max_tokens: int = 24) -> list[dict]:
    """Run one group chat; returns its messages ({name, content, ...}) in speaking order."""
    speakers = [ConversableAgent(name, system_message=prompt, human_input_mode="NEVER",
                                 llm_config=llm_config(base_url, model, name, chat_id, max_tokens))
                for name, prompt in SPEAKERS.items()]
    user = ConversableAgent("user", human_input_mode="NEVER", llm_config=False,
                            default_auto_reply="continue")
    chat = GroupChat(agents=[user, *speakers], messages=[], max_round=rounds,
                     speaker_selection_method="round_robin")
    manager = GroupChatManager(groupchat=chat, llm_config=False)
    user.initiate_chat(manager, message=task, silent=True)
    end_workflow(base_url, chat_id)
    return chat.messages


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-url", default="http://127.0.0.1:8000/v1")
    ap.add_argument("--model", required=True)
    ap.add_argument("--chat", default="chat-1")
    ap.add_argument("--task", default="Write a function that reverses a linked list.")
    args = ap.parse_args()
    for m in run_chat(args.base_url, args.model, args.chat, args.task):
        print(f"{m.get('name')}: {m.get('content')}")


if __name__ == "__main__":
    main()

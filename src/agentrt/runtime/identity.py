"""Which agent a call belongs to when nobody says: the anchor of its prompt.

Frameworks that send no agent name still send the agent's system prompt and tool definitions
first, and those are the same in every workflow. The agent is named by the chained hash id that
covers the prompt's first `anchor_tokens` tokens (fewer if the prompt is shorter), so equal
system prompts agree and different ones (almost surely) differ. Used by the runtime, the
schedulers, the routers, KVFlow and the predictor's samples, so they all infer the same agent.
"""

from __future__ import annotations


def anchor_agent(hash_ids: list[int], input_length: int, block_size: int,
                 anchor_tokens: int = 256) -> str:
    """The agent a prompt's anchor names: the chained hash id that covers its first
    `anchor_tokens` tokens (fewer if the prompt is shorter), so equal system prompts agree."""
    if not hash_ids:
        return "anchor:none"
    n_full = input_length // block_size
    k = max(1, anchor_tokens // block_size)
    n = max(1, min(k, n_full)) if n_full else 1
    return f"anchor:{hash_ids[n - 1]}"


def call_agent(c, block_size: int, anchor_tokens: int = 256) -> str:
    """The agent of a trace `Call`, explicit or inferred exactly as the runtime infers it."""
    return c.agent or anchor_agent(c.hash_ids, c.input_length, block_size, anchor_tokens)

"""LRU: what vLLM and SGLang do by default. Evicts the least recently touched leaf block."""

from __future__ import annotations

from agentrt.runtime.policy import Policy


class LRUPolicy(Policy):
    name = "lru"
    description = "least recently used block first (engines' default)"

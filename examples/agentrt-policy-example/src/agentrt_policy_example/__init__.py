"""An example agentrt policy in its own package: keep the leading blocks of every prompt.

The first `keep` blocks of a prompt are, in agent workloads, mostly system prompts and tool
definitions that every call of an agent shares; this policy evicts them only after every other
block, and otherwise evicts the least recently used. A block's depth never changes, so its score
changes only when it is touched: the policy keeps the cache's contract without `dynamic`.
"""

from __future__ import annotations

from agentrt.runtime.policy import Policy

__all__ = ["PrefixKeepPolicy"]


class PrefixKeepPolicy(Policy):
    name = "prefix-keep"
    description = "the first `keep` blocks of every prompt (system prompts) go last, then LRU (example plugin)"

    def __init__(self, keep: int = 8, seed: int = 0) -> None:
        super().__init__(seed)
        if keep < 0:
            raise ValueError(f"keep must be >= 0, got {keep}")
        self.keep = keep

    def score(self, block):
        # lowest first: deep blocks (False) before the leading ones (True), LRU within each
        return (block.depth <= self.keep, block.last_touch)

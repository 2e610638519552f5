"""A running request's hold on the cache: its locked path and its reserved GPU blocks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentrt.cache.block import Block


@dataclass(slots=True)
class Lease:
    tenant: str
    hash_ids: list[int]
    n_full: int             # full (cacheable) prompt blocks
    node: "Block"           # deepest locked block of the prompt path (the root if none)
    gpu_hit: int            # prompt blocks found on the GPU
    host_hit: int           # prompt blocks loaded from the host tier
    reserved: int           # GPU blocks still held outside the tree
    committed: bool = False
    released: bool = False

    @property
    def new_blocks(self) -> int:
        """Prompt blocks the request must compute."""
        return self.n_full - self.gpu_hit - self.host_hit

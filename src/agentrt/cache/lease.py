"""A running request's hold on the cache: its locked path and its reserved GPU blocks.

The path grows from the cached prefix (`acquire`) through the prompt blocks the request computed
(`commit_prompt`) to the output blocks it completed (`cache_output`); `node` is always its deepest
block and `depth` its length. `reserved` counts GPU blocks held outside the tree: blocks still to
compute, the partial last block, and output blocks taken one at a time as decoding crosses block
boundaries (`grow`).
"""

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
    node: "Block"           # deepest locked block of the path (the root if none)
    gpu_hit: int            # prompt blocks found on the GPU
    host_hit: int           # prompt blocks loaded from the host tier
    reserved: int           # GPU blocks still held outside the tree
    committed: bool = False  # the whole prompt is in the tree: output blocks may extend it
    released: bool = False
    depth: int = 0          # blocks on the locked path (hits, computed prompt blocks, outputs)
    output_blocks: int = 0  # output blocks cached on the path
    remote_hit: int = 0     # prompt blocks after the hits fetched from a peer replica (cluster only)

    @property
    def new_blocks(self) -> int:
        """Prompt blocks the request must compute."""
        return self.n_full - self.gpu_hit - self.host_hit - self.remote_hit

"""Side effects a policy asks the engine to carry out off the critical path (`act`).

Engines carry out what they can and ignore the rest: the simulator does both; the vLLM connector
prefetches from its host pool; the server sends warm-ups as real `max_tokens=1` requests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, Union

if TYPE_CHECKING:
    from agentrt.cache.block import Block


@dataclass(slots=True)
class WarmUp:
    """Prefill an agent's anchor (system prompt and tools) plus a minimal user message."""
    tenant: str
    agent: str
    hash_ids: list[int]          # the anchor's full blocks
    input_length: int            # anchor tokens + the minimal message


@dataclass(slots=True)
class Prefetch:
    """Load the host-tier blocks on the path to `node` into the GPU, up to `max_blocks` of them.

    `evict_below`: the engine may evict GPU blocks scoring strictly lower to make room (None:
    only free space is used). `reason` names the policy's motive for the engine's counters.
    """
    tenant: str
    node: "Block"
    max_blocks: int
    evict_below: object = None
    reason: str = ""


Action = Union[WarmUp, Prefetch]


class EngineView(Protocol):
    """What a policy may read of the engine when it acts."""

    now: float
    idle: bool                   # nothing is waiting: warm-ups and prefetches cost no one
    pcie_idle: bool              # no host<->GPU transfer in flight
    gpu_free: int                # free GPU blocks

    def gpu_prefix(self, tenant: str, hash_ids: list[int]) -> int:
        """Blocks of `hash_ids` cached on the GPU, as a prefix."""

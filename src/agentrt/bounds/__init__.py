"""Offline bounds: Belady MIN with bypass, MIN keeping held blocks, and the infinite cache."""

from __future__ import annotations

from agentrt.bounds.held import held_belady_bound
from agentrt.bounds.offline import BoundResult, belady_bound, infinite_bound

OFFLINE_BOUNDS = ("belady", "belady-held", "infinite")


def offline_bound(name: str, stream: list, holds: list | None, block_size: int, capacity: int) -> BoundResult:
    """The offline bound `name` over a recorded block stream (`holds`: when calls held their
    blocks, needed by `belady-held`) at `capacity` GPU blocks (`infinite` ignores it)."""
    if name == "belady":
        return belady_bound(stream, block_size, capacity)
    if name == "belady-held":
        return held_belady_bound(stream, holds, block_size, capacity)
    if name == "infinite":
        return infinite_bound(stream, block_size)
    raise ValueError(f"unknown offline bound {name!r}; one of {', '.join(OFFLINE_BOUNDS)}")

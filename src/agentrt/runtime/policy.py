"""The policy interface: observe, score, predict, act.

A policy is written once against this class and runs unchanged in the simulator, inside vLLM and
behind the server. It ranks; the cache owns the structure:
- `observe(event)`: update state from an engine event (see `events.py`); time is `event.now`.
- `score(block)`: a sort key; the cache evicts the lowest first. Contract: a block's score may
  change only when the block is touched, or after the policy bumps `self.epoch` (the cache then
  re-ranks once), so the cache can keep a heap instead of scanning its leaves.
- `predict(horizon)`: per active workflow, probabilities of the next agents over the horizon.
- `act(now, view)`: side effects for the engine to carry out off the critical path (prefetch host
  blocks, warm an agent's prefix).
With nothing overridden, a policy is LRU over block touches.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from agentrt.cache.block import Block
    from agentrt.runtime.events import Event


@dataclass(slots=True)
class Prediction:
    """For one workflow: `steps[k][agent]` = P(the k+1-th next call is by `agent`); `end[k]` =
    P(the workflow has ended before step k+1)."""
    workflow: str
    steps: list[dict[str, float]] = field(default_factory=list)
    end: list[float] = field(default_factory=list)


class Policy:
    name: ClassVar[str] = "base"
    description: ClassVar[str] = ""
    dynamic: ClassVar[bool] = False      # scores change between touches (bumps `epoch`)
    wants_events: ClassVar[bool] = False  # engines skip building events for policies that don't
    needs_tags: ClassVar[bool] = False    # the runtime tags blocks with the threads that used them
    acts: ClassVar[bool] = False          # engines call `act` between scheduler steps
    untags_dead_branches: ClassVar[bool] = False  # the runtime untags a thread's abandoned history
    safety_net: ClassVar[bool] = True     # the runtime may rank by LRU while this policy loses to it

    def __init__(self, seed: int = 0) -> None:
        self.epoch = 0
        self.seed = seed
        self.runtime = None

    def bind(self, runtime) -> None:
        """Called once by the `AgentRuntime` hosting the policy (workflows, agents, clock)."""
        self.runtime = runtime

    needs_training: ClassVar[bool] = False  # learns offline from a training split (`train`)

    def train(self, calls, block_size: int = 16) -> None:
        """Offline training on a separate trace's calls (policies that need it override this)."""

    def observe(self, event: "Event") -> None:
        """Take an engine event."""

    def score(self, block: "Block"):
        """Sort key of an evictable block: lowest goes first. Default: least recently touched."""
        return block.last_touch

    def predict(self, horizon: int) -> dict[tuple[str, str], Prediction]:
        """Per live workflow, keyed (tenant, workflow id) as the runtime keys them."""
        return {}

    def act(self, now: float, view) -> list:
        return []

    def state_bytes(self) -> int:
        """Approximate size of the policy's own state (for the overhead benchmark)."""
        return 0

    def stats(self) -> dict[str, int | float]:
        """A few numbers about the policy's own decisions for the engine integrations' metrics
        (the vLLM connector exports the keys it knows). Read on every stats read (each
        scheduler step and finished request): keep it O(1)."""
        return {}

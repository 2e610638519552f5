"""Simulated tool-time estimates: what a framework that announces its tool calls tells the runtime.

Model
- When a call finishes and its workflow's next call waits on a tool (the trace's `think_ms` of
  the calls it releases; the shortest where it releases several), a framework that knows which
  tool it is about to run can say how long it expects it to take: a test suite's usual
  duration, a fetch timeout, a sandbox's start-up. Live, that is the vLLM connector's
  `agentrt.tool_call` hint with `expected_s` (docs/vllm.md); policies read it as
  `CallFinished.tool_expected_s`.
- In the simulator the estimate is the trace's own wait times a lognormal error,
  `exp(sigma * z)` with z ~ N(0, 1): median-unbiased, sigma 0 is exact, sigma 0.5 is within a
  factor 1.65 of the truth two times in three, sigma 1 within a factor 2.7. No framework is
  exact; the benchmarks report several sigmas (benchmarks/tool_hints.py).
- The error is drawn from the seed, the workflow id and the call index only (a string-seeded
  `random.Random`, which does not depend on `PYTHONHASHSEED`), so a call gets the same estimate
  under every policy and scheduler, and runs compare like with like.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass


@dataclass(slots=True, frozen=True)
class ToolHints:
    """Announced tool times with lognormal error `sigma` (0: exact)."""

    sigma: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        if not (isinstance(self.sigma, (int, float)) and math.isfinite(self.sigma) and self.sigma >= 0):
            raise ValueError(f"tool hint sigma must be a finite number >= 0, got {self.sigma!r}")

    @classmethod
    def maybe(cls, sigma: float | None, seed: int) -> "ToolHints | None":
        """Hints with error `sigma`, or None (no announcements) when `sigma` is None."""
        return None if sigma is None else cls(float(sigma), seed)

    def estimate(self, workflow: str, index: int, wait_s: float) -> float:
        """The announced duration (seconds) of a tool wait that really lasts `wait_s`, after call
        `index` of `workflow`."""
        if self.sigma == 0:
            return wait_s
        z = random.Random(f"{self.seed}/{workflow}/{index}").gauss(0.0, 1.0)
        return wait_s * math.exp(self.sigma * z)


@dataclass(slots=True, frozen=True)
class RetainHints:
    """A framework that, when a call ends in a tool call, sends vLLM's standard `kv.retain` for
    the call's whole context (prompt and answer) at `priority`, for the tool time it announces
    (the trace's, with lognormal error `sigma`: the same draw as `ToolHints` of that sigma and
    seed). The engine keeps at most `budget` of its GPU blocks retained (`runtime/retention.py`)."""

    sigma: float = 0.0
    seed: int = 0
    budget: float = 0.25
    priority: int = 50

    def __post_init__(self) -> None:
        ToolHints(self.sigma, self.seed)             # the same check of sigma
        if not (isinstance(self.budget, (int, float)) and 0.0 < self.budget <= 1.0):
            raise ValueError(f"retain budget must be in (0, 1], got {self.budget!r}")

    @classmethod
    def maybe(cls, sigma: float | None, seed: int, budget: float = 0.25) -> "RetainHints | None":
        return None if sigma is None else cls(float(sigma), seed, float(budget))

    def duration(self, workflow: str, index: int, wait_s: float) -> float:
        return ToolHints(self.sigma, self.seed).estimate(workflow, index, wait_s)

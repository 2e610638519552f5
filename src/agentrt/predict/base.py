"""The workflow predictor interface PBKV scores with: K-step distributions over next agents.

A `PathState` is what is known of one live workflow after its latest call: the agents it has
called so far (oldest first, the current agent last) and the latest call's semantic signal (the
trace's `signal`, in a real engine the last prefill token's hidden state; None when absent).

`predict_batch(states)` returns an array of shape (B, K, V + 1): for each workflow and each
step k = 1..K, a joint distribution over "the k-th next call is made by agent v" (v < V, in
`self.agents` order) and "the workflow has ended before its k-th next call" (index V, END).
Each (b, k) row sums to 1. So P(workflow still running at step k) = 1 - out[b, k, V], and
out[b, k, v] is PBKV's s_w^(k) * P_w^(k)(v).

Predictors are trained from traces (`WorkflowSample`s: a workflow's agents and signals in call
order), saved to and loaded from one file, and report top-1 accuracy and log loss per step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Protocol

import numpy as np

END = "<end>"


@dataclass(slots=True)
class PathState:
    path: list[str]                         # agents called so far, current agent last
    signal: list[float] | None = None       # the latest call's signal


@dataclass(slots=True)
class WorkflowSample:
    """One workflow of a training trace: its agents and their calls' signals, in call order."""
    workflow: str
    agents: list[str]
    signals: list[list[float] | None] = field(default_factory=list)


@dataclass(slots=True)
class StepMetrics:
    step: int
    top1: float            # accuracy of the argmax over agents + END
    log_loss: float        # mean negative log-likelihood of the true outcome
    samples: int


class WorkflowPredictor(Protocol):
    kind: ClassVar[str]
    horizon: int
    agents: list[str]

    def predict_batch(self, states: list[PathState]) -> np.ndarray: ...

    def save(self, path: str) -> None: ...

"""First-order Markov workflow predictor: the baseline every graph model is compared with.

Model: the next call's agent depends only on the current agent. Counts C[i, j] of observed
transitions i -> j (j < V) and terminations i -> END (j = V) are smoothed by adding `eps` to
every cell, row-normalised into T over agents + an absorbing END, and the K-step joint
distributions are exact matrix powers: out[k] = T^k[current]. The signal is ignored.
Fallbacks: an agent unseen in training predicts from the pooled transition distribution (every
transition of training, smoothed) followed by T; an empty path predicts the first agent from
the smoothed start counts. All K tables are precomputed at fit time, so `predict_batch` is a
gather. No torch is needed except to save and load (`agentrt.predict.io`).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from agentrt.predict.base import PathState, WorkflowSample


class MarkovPredictor:
    kind: ClassVar[str] = "markov"
    provenance: dict | None = None    # what it was trained on, once saved by `agentrt train`

    def __init__(self, horizon: int = 4, eps: float = 0.05) -> None:
        if horizon < 1:
            raise ValueError(f"horizon must be >= 1, got {horizon}")
        if eps < 0:
            raise ValueError(f"eps must be >= 0, got {eps}")
        self.horizon = horizon
        self.eps = eps
        self.agents: list[str] = []
        self.counts = np.zeros((0, 1))      # (V, V + 1) transitions and terminations
        self.start = np.zeros(0)            # (V,) first agents of workflows
        self._index: dict[str, int] = {}
        self._table = np.zeros((2, horizon, 1))

    # ------------------------------------------------------------------ training
    def fit(self, samples: list[WorkflowSample], seed: int = 0,
            val: list[WorkflowSample] | None = None) -> MarkovPredictor:
        """Count transitions of `samples` (seed and val are unused: counting is exact)."""
        agents = sorted({a for s in samples for a in s.agents})
        index = {a: i for i, a in enumerate(agents)}
        v = len(agents)
        counts = np.zeros((v, v + 1))
        start = np.zeros(v)
        for s in samples:
            if not s.agents:
                continue
            ids = [index[a] for a in s.agents]
            start[ids[0]] += 1
            np.add.at(counts, (ids[:-1], ids[1:]), 1.0)
            counts[ids[-1], v] += 1
        return self.set_counts(agents, counts, start)

    def set_counts(self, agents: list[str], counts: np.ndarray, start: np.ndarray) -> MarkovPredictor:
        self.agents = list(agents)
        self._index = {a: i for i, a in enumerate(self.agents)}
        self.counts = np.asarray(counts, dtype=np.float64)
        self.start = np.asarray(start, dtype=np.float64)
        self._table = self._build_table()
        return self

    @staticmethod
    def _normalise(rows: np.ndarray) -> np.ndarray:
        sums = rows.sum(axis=-1, keepdims=True)
        uniform = np.full_like(rows, 1.0 / rows.shape[-1])
        return np.where(sums > 0, rows / np.where(sums > 0, sums, 1.0), uniform)

    def transition_matrix(self) -> np.ndarray:
        """T over agents + END, (V + 1, V + 1), END absorbing."""
        v = len(self.agents)
        t = np.zeros((v + 1, v + 1))
        t[:v] = self._normalise(self.counts + self.eps)
        t[v, v] = 1.0
        return t

    def _build_table(self) -> np.ndarray:
        """(V + 2, K, V + 1): rows per known agent, then the unknown agent, then the empty path."""
        v = len(self.agents)
        t = self.transition_matrix()
        pooled = self._normalise(self.counts.sum(axis=0) + self.eps) if v else np.ones(1)
        first = np.zeros(v + 1)
        if v:
            first[:v] = self._normalise(self.start + self.eps)
        else:
            first[0] = 1.0
        table = np.zeros((v + 2, self.horizon, v + 1))
        power = np.eye(v + 1)        # T^(k-1)
        for k in range(self.horizon):
            table[:v, k] = (t @ power)[:v]      # T^k rows of the agents
            table[v, k] = pooled @ power
            table[v + 1, k] = first @ power
            power = power @ t
        return table

    # ------------------------------------------------------------------ inference
    def predict_batch(self, states: list[PathState]) -> np.ndarray:
        v = len(self.agents)
        rows = [(self._index.get(s.path[-1], v) if s.path else v + 1) for s in states]
        return self._table[np.asarray(rows, dtype=np.int64)]

    # ------------------------------------------------------------------ persistence
    def to_dict(self) -> dict:
        return {"kind": self.kind, "agents": list(self.agents), "horizon": self.horizon,
                "config": {"eps": self.eps},
                "counts": self.counts.tolist(), "start": self.start.tolist()}

    @classmethod
    def from_dict(cls, d: dict) -> MarkovPredictor:
        p = cls(horizon=int(d["horizon"]), **d.get("config", {}))
        v = len(d["agents"])
        counts = np.asarray(d["counts"], dtype=np.float64).reshape(v, v + 1)
        return p.set_counts(d["agents"], counts, np.asarray(d["start"], dtype=np.float64).reshape(v))

    def save(self, path: str) -> None:
        from agentrt.predict.io import save_dict
        save_dict(self.to_dict(), path)

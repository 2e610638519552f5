"""The global call graph G of training traces: agents as nodes, observed transitions as edges.

Nodes: the agents of the training samples (sorted), plus one UNKNOWN node (index V) that stands
for every agent not seen in training; it has zero features and only its self-loop, so a GNN
embeds it from its own (zero) input alone.
Node features are statistics, not identities, so the GNN stays inductive: call volume, in/out
degree, normalised in/out transition mass, self-loop, termination and start rates, mean
(relative and absolute) position in the workflow, mean workflow length, successor entropy,
signal presence and the mean standardised signal of the agent's calls. Columns are z-scored
over the known nodes (so the unknown node's zeros are the average agent).
Edges: i -> j for every observed transition, with its count. R-GCN sees three relations:
forward transition (0), reverse transition (1), self-loop (2, on every node); GraphSAGE sees the
forward and reverse edges untyped (its root weight plays the self-loop's part).
Signals: vectors of differing length are cut or zero-padded to the longest seen (D); mean and
standard deviation per dimension are kept here so training and inference standardise alike.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from agentrt.predict.base import WorkflowSample

FORWARD, REVERSE, SELF = 0, 1, 2
NUM_RELATIONS = 3
BASE_FEATURES = ("log_calls", "call_share", "log_out_degree", "log_in_degree", "out_mass",
                 "in_mass", "self_rate", "end_rate", "start_rate", "mean_rel_pos",
                 "mean_log_pos", "mean_log_len", "succ_entropy", "signal_rate")


@dataclass(slots=True)
class SignalNorm:
    dim: int
    mean: np.ndarray      # (dim,)
    std: np.ndarray       # (dim,)

    def apply(self, signals: list[list[float] | None]) -> tuple[np.ndarray, np.ndarray]:
        """(B, dim) standardised signals (zeros where absent) and the (B,) presence mask."""
        out = np.zeros((len(signals), self.dim), dtype=np.float32)
        has = np.zeros(len(signals), dtype=np.float32)
        if self.dim == 0:
            return out, has
        for i, s in enumerate(signals):
            if s is not None and len(s):
                m = min(len(s), self.dim)
                out[i, :m] = s[:m]
                has[i] = 1.0
        out = (out - self.mean) / self.std * has[:, None]
        return out.astype(np.float32), has


def fit_signal_norm(samples: list[WorkflowSample]) -> SignalNorm:
    sigs = [s for w in samples for s in w.signals if s is not None and len(s)]
    dim = max((len(s) for s in sigs), default=0)
    if not sigs:
        return SignalNorm(0, np.zeros(0, np.float32), np.ones(0, np.float32))
    m = np.zeros((len(sigs), dim), dtype=np.float64)
    for i, s in enumerate(sigs):
        m[i, :len(s)] = s
    std = m.std(axis=0)
    return SignalNorm(dim, m.mean(axis=0).astype(np.float32),
                      np.where(std > 1e-8, std, 1.0).astype(np.float32))


@dataclass(slots=True)
class CallGraph:
    agents: list[str]
    x: np.ndarray             # (V + 1, F) float32 node features, row V: the unknown agent
    edge_index: np.ndarray    # (2, E) int64, forward, reverse and self-loop edges
    edge_type: np.ndarray     # (E,) int64 relation of each edge
    edge_count: np.ndarray    # (E,) observed transitions behind each edge (self-loops: 0)
    signal: SignalNorm

    @property
    def unknown(self) -> int:
        return len(self.agents)

    @property
    def num_nodes(self) -> int:
        return len(self.agents) + 1

    def sage_edges(self) -> np.ndarray:
        return self.edge_index[:, self.edge_type != SELF]

    def to_dict(self) -> dict:
        return {"agents": list(self.agents), "x": self.x.tolist(), "edge_index": self.edge_index.tolist(),
                "edge_type": self.edge_type.tolist(), "edge_count": self.edge_count.tolist(),
                "signal_dim": self.signal.dim, "signal_mean": self.signal.mean.tolist(),
                "signal_std": self.signal.std.tolist()}

    @classmethod
    def from_dict(cls, d: dict) -> CallGraph:
        f32 = np.float32
        n = len(d["agents"]) + 1
        return cls(list(d["agents"]), np.asarray(d["x"], dtype=f32).reshape(n, -1),
                   np.asarray(d["edge_index"], dtype=np.int64).reshape(2, -1),
                   np.asarray(d["edge_type"], dtype=np.int64), np.asarray(d["edge_count"], dtype=np.int64),
                   SignalNorm(int(d["signal_dim"]), np.asarray(d["signal_mean"], dtype=f32),
                              np.asarray(d["signal_std"], dtype=f32)))


def build_graph(samples: list[WorkflowSample]) -> CallGraph:
    agents = sorted({a for s in samples for a in s.agents})
    idx = {a: i for i, a in enumerate(agents)}
    v = len(agents)
    norm = fit_signal_norm(samples)
    trans = np.zeros((v, v + 1))                 # column v: terminations
    calls, starts = np.zeros(v), np.zeros(v)
    rel_pos, log_pos, log_len, sig_n = np.zeros(v), np.zeros(v), np.zeros(v), np.zeros(v)
    sig_sum = np.zeros((v, norm.dim))
    for s in samples:
        if not s.agents:
            continue
        ids = [idx[a] for a in s.agents]
        n = len(ids)
        starts[ids[0]] += 1
        np.add.at(trans, (ids[:-1], ids[1:]), 1.0)
        trans[ids[-1], v] += 1
        pos = np.arange(n)
        np.add.at(calls, ids, 1.0)
        np.add.at(rel_pos, ids, pos / max(n - 1, 1))
        np.add.at(log_pos, ids, np.log1p(pos))
        np.add.at(log_len, ids, math.log1p(n))
        sigs = list(s.signals) + [None] * (n - len(s.signals))
        z, has = norm.apply(sigs[:n])
        np.add.at(sig_n, ids, has)
        np.add.at(sig_sum, ids, z)
    c = np.maximum(calls, 1.0)
    moves = trans[:, :v]
    total_moves = max(moves.sum(), 1.0)
    out_tot = np.maximum(trans.sum(axis=1), 1.0)
    p = trans / out_tot[:, None]
    entropy = -(p * np.log(np.where(p > 0, p, 1.0))).sum(axis=1) / math.log(v + 1) if v else np.zeros(0)
    base = np.stack([np.log1p(calls), calls / max(calls.sum(), 1.0),
                     np.log1p((moves > 0).sum(axis=1)), np.log1p((moves > 0).sum(axis=0)),
                     moves.sum(axis=1) / total_moves, moves.sum(axis=0) / total_moves,
                     np.diag(moves) / out_tot, trans[:, v] / out_tot, starts / c, rel_pos / c,
                     log_pos / c, log_len / c, entropy, sig_n / c], axis=1) if v else np.zeros((0, 14))
    feats = np.concatenate([base, sig_sum / np.maximum(sig_n, 1.0)[:, None]], axis=1)
    if v:
        sd = feats.std(axis=0)
        feats = (feats - feats.mean(axis=0)) / np.where(sd > 1e-8, sd, 1.0)
    x = np.zeros((v + 1, feats.shape[1]), dtype=np.float32)
    x[:v] = feats
    src, dst = np.nonzero(moves)
    cnt = moves[src, dst].astype(np.int64)
    loops = np.arange(v + 1)
    edge_index = np.concatenate([np.stack([src, dst]), np.stack([dst, src]), np.stack([loops, loops])], axis=1)
    edge_type = np.concatenate([np.full(len(src), FORWARD), np.full(len(src), REVERSE), np.full(v + 1, SELF)])
    edge_count = np.concatenate([cnt, cnt, np.zeros(v + 1, dtype=np.int64)])
    return CallGraph(agents, x, edge_index.astype(np.int64), edge_type.astype(np.int64), edge_count, norm)

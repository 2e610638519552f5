"""Multi-signal workflow predictors: GraphSAGE (default) and R-GCN over the call graph G.

Model (one module, the graph layer chosen by `conv`):
- node embeddings: two torch_geometric layers (SAGEConv over G's transition edges in both
  directions, or RGCNConv over its forward / reverse / self-loop relations) on G's statistic
  features, concatenated with a learned per-agent id embedding (zero-initialised for the unknown
  node, which stands for every agent unseen in training);
- h_cur: the current agent's node embedding;
- h_path: scaled dot-product attention (multi-head), query from h_cur, over the node embeddings
  plus recency embeddings of the path's last `max_path` agents (the current one included), so two
  workflows reaching the same agent by different paths differ;
- h_txt: Linear(standardised signal), zeros where the call has none (a presence flag goes too);
- head: MLP over [h_cur, h_path, h_txt, log path length, presence] -> K x (V + 1) logits at once;
  softmax per step gives the joint distribution of base.py (END = index V).
Training: Adam, cross-entropy summed over the K steps, early stopping on the validation loss
(best weights kept), seeded without touching the caller's global RNG. G is fixed after training,
so node embeddings are computed once and cached; `predict_batch` is gather + attention + MLP.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.nn import RGCNConv, SAGEConv

from agentrt.predict.base import PathState, WorkflowSample
from agentrt.predict.graph import NUM_RELATIONS, CallGraph, build_graph
from agentrt.predict.samples import expand, split_samples, target_matrix

LOG_MAX_LEN = math.log1p(64)   # the runtime keeps at most 64 agents of a path


@dataclass(slots=True)
class NeuralConfig:
    hidden: int = 64
    heads: int = 4
    max_path: int = 16
    id_dim: int = 16            # learned per-agent embedding next to the statistics (0: none)
    dropout: float = 0.1
    lr: float = 3e-3
    weight_decay: float = 1e-4
    epochs: int = 60
    batch_size: int = 256
    patience: int = 6           # epochs without a better validation loss before stopping
    unknown_rate: float = 0.02  # share of path agents replaced by the unknown node in training
    val_fraction: float = 0.15  # of the training workflows, for early stopping
    threads: int = 1            # torch threads in training and inference: tensors are tiny, and
                                # extra threads only spin (10x slower on a loaded 2-core machine)


@dataclass(slots=True)
class Batch:
    path: torch.Tensor      # (B, L) node ids, current agent first, then older ones
    mask: torch.Tensor      # (B, L) True where path holds an agent
    signal: torch.Tensor    # (B, D)
    extra: torch.Tensor     # (B, 2): log path length (scaled), signal presence


class PathModel(nn.Module):
    def __init__(self, conv: str, graph: CallGraph, horizon: int, cfg: NeuralConfig) -> None:
        super().__init__()
        h, n = cfg.hidden, graph.num_nodes
        self.conv, self.horizon, self.outputs, self.heads = conv, horizon, n, cfg.heads
        self.id_emb = nn.Embedding(n, cfg.id_dim) if cfg.id_dim else None
        if self.id_emb is not None:
            with torch.no_grad():
                self.id_emb.weight[graph.unknown].zero_()
        d_in = graph.x.shape[1] + cfg.id_dim
        if conv == "sage":
            self.gnn = nn.ModuleList([SAGEConv(d_in, h), SAGEConv(h, h)])
        elif conv == "rgcn":
            self.gnn = nn.ModuleList([RGCNConv(d_in, h, NUM_RELATIONS), RGCNConv(h, h, NUM_RELATIONS)])
        else:
            raise ValueError(f"unknown graph layer {conv!r}")
        self.pos = nn.Embedding(cfg.max_path, h)
        self.qkv = nn.Linear(h, 3 * h)
        self.attn_out = nn.Linear(h, h)
        self.txt = nn.Linear(graph.signal.dim, h) if graph.signal.dim else None
        self.drop = nn.Dropout(cfg.dropout)
        self.head = nn.Sequential(nn.Linear(3 * h + 2, 2 * h), nn.ReLU(), nn.Dropout(cfg.dropout),
                                  nn.Linear(2 * h, horizon * n))

    def embed_nodes(self, x: torch.Tensor, edge_index: torch.Tensor, edge_type: torch.Tensor) -> torch.Tensor:
        if self.id_emb is not None:
            x = torch.cat([x, self.id_emb.weight], dim=1)
        for i, layer in enumerate(self.gnn):
            x = layer(x, edge_index) if self.conv == "sage" else layer(x, edge_index, edge_type)
            if i + 1 < len(self.gnn):
                x = self.drop(F.relu(x))
        return x

    def forward(self, nodes: torch.Tensor, b: Batch) -> torch.Tensor:
        bsz, length = b.path.shape
        h = nodes.shape[1]
        dh = h // self.heads
        seq = nodes[b.path] + self.pos.weight[:length]              # (B, L, h)
        q, k, v = self.qkv(seq).split(h, dim=2)
        q = q[:, :1].view(bsz, 1, self.heads, dh).transpose(1, 2)   # query: the current agent
        k = k.reshape(bsz, length, self.heads, dh).transpose(1, 2)
        v = v.reshape(bsz, length, self.heads, dh).transpose(1, 2)
        att = F.scaled_dot_product_attention(q, k, v, attn_mask=b.mask[:, None, None, :])
        h_path = self.attn_out(att.transpose(1, 2).reshape(bsz, h))
        h_cur = nodes[b.path[:, 0]]
        h_txt = (self.txt(b.signal) * b.extra[:, 1:]) if self.txt is not None else h_cur.new_zeros(bsz, h)
        z = torch.cat([h_cur, self.drop(h_path), h_txt, b.extra], dim=1)
        return self.head(z).view(bsz, self.horizon, self.outputs)


def encode(states: list[PathState], index: dict[str, int], graph: CallGraph, max_path: int) -> Batch:
    """States as tensors; an unknown agent (or an empty path's missing one) is the unknown node."""
    unk = graph.unknown
    length = max(1, min(max_path, max((len(s.path) for s in states), default=1)))
    path = np.full((len(states), length), unk, dtype=np.int64)
    mask = np.zeros((len(states), length), dtype=bool)
    mask[:, 0] = True
    n = np.zeros(len(states), dtype=np.float32)
    for i, s in enumerate(states):
        recent = s.path[:-max_path - 1:-1]
        if recent:
            path[i, :len(recent)] = [index.get(a, unk) for a in recent]
            mask[i, :len(recent)] = True
        n[i] = len(s.path)
    sig, has = graph.signal.apply([s.signal for s in states])
    extra = np.stack([np.log1p(n) / LOG_MAX_LEN, has], axis=1).astype(np.float32)
    return Batch(torch.from_numpy(path), torch.from_numpy(mask), torch.from_numpy(sig), torch.from_numpy(extra))


def _take(b: Batch, idx: torch.Tensor) -> Batch:
    return Batch(b.path[idx], b.mask[idx], b.signal[idx], b.extra[idx])


def train_model(model: PathModel, graph: CallGraph, data: Batch, y: torch.Tensor,
                val: tuple[Batch, torch.Tensor] | None, cfg: NeuralConfig, seed: int) -> int:
    """Fit `model` in place (best validation weights restored); returns the epochs run."""
    x = torch.from_numpy(graph.x)
    ei = torch.from_numpy(graph.sage_edges() if model.conv == "sage" else graph.edge_index)
    et = torch.from_numpy(graph.edge_type if model.conv == "rgcn" else np.zeros(0, dtype=np.int64))
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    gen = torch.Generator().manual_seed(seed)
    k_steps = y.shape[1]

    def loss_of(b: Batch, yb: torch.Tensor) -> torch.Tensor:
        logits = model(model.embed_nodes(x, ei, et), b)
        return F.cross_entropy(logits.reshape(-1, logits.shape[2]), yb.reshape(-1)) * k_steps

    best, best_state, bad, epochs = math.inf, None, 0, 0
    n = y.shape[0]
    for epoch in range(cfg.epochs):
        epochs = epoch + 1
        model.train()
        perm = torch.randperm(n, generator=gen)
        for lo in range(0, n, cfg.batch_size):
            idx = perm[lo:lo + cfg.batch_size]
            b = _take(data, idx)
            if cfg.unknown_rate > 0:
                # so that agents unseen in training get a trained fallback, not an arbitrary one
                drop = (torch.rand(b.path.shape, generator=gen) < cfg.unknown_rate) & b.mask
                b.path = torch.where(drop, graph.unknown, b.path)
            opt.zero_grad()
            loss_of(b, y[idx]).backward()
            opt.step()
        if val is None:
            continue
        model.eval()
        with torch.no_grad():
            vl = float(loss_of(*val))
        if vl < best - 1e-4:
            best, bad = vl, 0
            best_state = {k: t.detach().clone() for k, t in model.state_dict().items()}
        else:
            bad += 1
            if bad >= cfg.patience:
                break
    if best_state is not None:
        model.load_state_dict(best_state)
    model.eval()
    return epochs


@contextmanager
def _threads(n: int) -> Iterator[None]:
    prev = torch.get_num_threads()
    torch.set_num_threads(max(1, n))
    try:
        yield
    finally:
        torch.set_num_threads(prev)


class GraphSAGEPredictor:
    """The GraphSAGE predictor; `RGCNPredictor` swaps the graph layer, nothing else."""
    kind: ClassVar[str] = "graphsage"
    conv: ClassVar[str] = "sage"
    provenance: dict | None = None    # what it was trained on, once saved by `agentrt train`

    def __init__(self, horizon: int = 4, **opts) -> None:
        if horizon < 1:
            raise ValueError(f"horizon must be >= 1, got {horizon}")
        self.horizon = horizon
        self.config = NeuralConfig(**opts)
        if self.config.hidden % self.config.heads:
            raise ValueError(f"hidden ({self.config.hidden}) must be a multiple of heads ({self.config.heads})")
        self.agents: list[str] = []
        self.graph: CallGraph | None = None
        self.model: PathModel | None = None
        self.epochs_run = 0
        self._index: dict[str, int] = {}
        self._nodes: torch.Tensor | None = None

    def fit(self, samples: list[WorkflowSample], seed: int = 0,
            val: list[WorkflowSample] | None = None) -> GraphSAGEPredictor:
        """Train on `samples`, early-stopping on `val` (default: a seeded share of `samples`)."""
        cfg = self.config
        if val is None:
            samples, val = split_samples(samples, cfg.val_fraction, seed + 1) if len(samples) >= 5 else (samples, [])
        self.graph = build_graph(samples + val)
        self.agents = list(self.graph.agents)
        self._index = {a: i for i, a in enumerate(self.agents)}
        with torch.random.fork_rng(devices=[]), _threads(cfg.threads):
            torch.manual_seed(seed)
            self.model = PathModel(self.conv, self.graph, self.horizon, cfg)
            data, y = self._dataset(samples)
            vset = self._dataset(val) if val else None
            if y.shape[0]:
                self.epochs_run = train_model(self.model, self.graph, data, y, vset, cfg, seed)
        self._cache_nodes()
        return self

    def _dataset(self, samples: list[WorkflowSample]) -> tuple[Batch, torch.Tensor]:
        ex = expand(samples, self.horizon)
        y = torch.from_numpy(target_matrix(ex.targets, self.agents).reshape(-1, self.horizon))
        return encode(ex.states, self._index, self.graph, self.config.max_path), y

    def _cache_nodes(self) -> None:
        g = self.graph
        self.model.eval()
        edges = g.sage_edges() if self.conv == "sage" else g.edge_index
        with torch.no_grad():
            self._nodes = self.model.embed_nodes(torch.from_numpy(g.x), torch.from_numpy(edges),
                                                 torch.from_numpy(g.edge_type))

    def predict_batch(self, states: list[PathState]) -> np.ndarray:
        if self.model is None:
            raise RuntimeError(f"{self.kind} predictor is not trained")
        if not states:
            return np.zeros((0, self.horizon, len(self.agents) + 1))
        with torch.inference_mode(), _threads(self.config.threads):
            b = encode(states, self._index, self.graph, self.config.max_path)
            logits = self.model(self._nodes, b)
            return torch.softmax(logits.double(), dim=2).numpy()

    def to_dict(self) -> dict:
        return {"kind": self.kind, "agents": list(self.agents), "horizon": self.horizon,
                "config": asdict(self.config), "graph": self.graph.to_dict(),
                "state_dict": self.model.state_dict(), "epochs_run": self.epochs_run}

    @classmethod
    def from_dict(cls, d: dict) -> GraphSAGEPredictor:
        p = cls(int(d["horizon"]), **d["config"])
        p.graph = CallGraph.from_dict(d["graph"])
        p.agents = list(p.graph.agents)
        p._index = {a: i for i, a in enumerate(p.agents)}
        p.model = PathModel(cls.conv, p.graph, p.horizon, p.config)
        p.model.load_state_dict(d["state_dict"])
        p.epochs_run = int(d.get("epochs_run", 0))
        p._cache_nodes()
        return p

    def save(self, path: str) -> None:
        from agentrt.predict.io import save_dict
        save_dict(self.to_dict(), path)


class RGCNPredictor(GraphSAGEPredictor):
    kind: ClassVar[str] = "rgcn"
    conv: ClassVar[str] = "rgcn"

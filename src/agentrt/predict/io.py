"""Making, training, saving and loading workflow predictors by kind.

Kinds: `graphsage` (default), `rgcn` (agentrt.predict.neural, which needs torch_geometric: the
`gnn` extra, `pip install 'agentrt[gnn]'`) and `markov` (agentrt.predict.markov, numpy only).
Without torch_geometric the neural kinds raise `AgentrtError` saying how to install it; a policy
that trains its own predictor falls back instead (`gnn_missing`, policies/pbkv/policy.py).
A saved predictor is one file: `torch.save` of a plain dict (format tag, kind, agents, horizon,
config, and the kind's state: counts for markov; G's features and the state_dict for the neural
kinds; and, from `agentrt train`, the provenance of its training data, see
agentrt.predict.provenance), read back with `torch.load(weights_only=True)`, so loading
never runs pickled code. `train_predictor` splits by workflow (seeded), trains on the rest and
reports per-step top-1 and log loss on the held-out workflows, plus the training time.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from agentrt.errors import AgentrtError, unknown_name
from agentrt.predict.base import StepMetrics, WorkflowSample
from agentrt.predict.samples import evaluate, split_samples

FORMAT = "agentrt-predictor/1"
KINDS = ("graphsage", "markov", "rgcn")
DEFAULT_KIND = "graphsage"
NEURAL_KINDS = ("graphsage", "rgcn")
GNN_INSTALL = "pip install 'agentrt[gnn]'"


def gnn_missing() -> str | None:
    """The module the neural kinds need and cannot import (torch or torch_geometric), or None."""
    try:
        from agentrt.predict import neural  # noqa: F401
    except ModuleNotFoundError as e:
        return (e.name or "torch_geometric").split(".")[0]
    return None


@dataclass(slots=True)
class TrainReport:
    kind: str
    horizon: int
    steps: list[StepMetrics]            # on the held-out workflows (empty when none are held out)
    train_seconds: float
    train_workflows: int
    heldout_workflows: int
    agents: int
    epochs: int = 0                     # epochs run (0 for markov)
    options: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"kind": self.kind, "horizon": self.horizon, "train_seconds": self.train_seconds,
                "train_workflows": self.train_workflows, "heldout_workflows": self.heldout_workflows,
                "agents": self.agents, "epochs": self.epochs, "options": self.options,
                "steps": [{"step": s.step, "top1": s.top1, "log_loss": s.log_loss, "samples": s.samples}
                          for s in self.steps]}


def _class(kind: str):
    if kind == "markov":
        from agentrt.predict.markov import MarkovPredictor
        return MarkovPredictor
    if kind not in KINDS:
        raise unknown_name("predictor kind", kind, list(KINDS))
    missing = gnn_missing()
    if missing is not None:
        raise AgentrtError(f"predictor kind '{kind}' needs torch and torch_geometric ({missing} is "
                           f"not installed: {GNN_INSTALL}), or use --predictor-kind markov")
    from agentrt.predict import neural
    return neural.GraphSAGEPredictor if kind == "graphsage" else neural.RGCNPredictor


def make_predictor(kind: str = DEFAULT_KIND, horizon: int = 4, **opts):
    """An untrained predictor; `opts` are the kind's options (NeuralConfig fields, or markov's eps).

    `epochs` is accepted and ignored by markov, so callers can pass it for any kind.
    """
    cls = _class(kind)
    if kind == "markov":
        opts.pop("epochs", None)
    try:
        return cls(horizon=horizon, **opts)
    except TypeError as e:
        raise AgentrtError(f"bad option for predictor kind '{kind}': {e}") from None
    except ValueError as e:
        raise AgentrtError(str(e)) from None


def fit_and_evaluate(kind: str, train: list[WorkflowSample], heldout: list[WorkflowSample],
                     horizon: int = 4, seed: int = 0, **opts):
    """Train a `kind` predictor on `train`, score it on `heldout`: (predictor, TrainReport)."""
    pred = make_predictor(kind, horizon, **opts)
    t0 = time.perf_counter()
    pred.fit(train, seed=seed)
    seconds = time.perf_counter() - t0
    steps = evaluate(pred, heldout) if heldout else []
    return pred, TrainReport(kind, horizon, steps, seconds, len(train), len(heldout), len(pred.agents),
                             getattr(pred, "epochs_run", 0), dict(opts))


def train_predictor(kind: str, samples: list[WorkflowSample], horizon: int = 4, seed: int = 0,
                    holdout: float = 0.2, **opts):
    """Hold out `holdout` of the workflows (seeded), train on the rest: (predictor, TrainReport)."""
    if not samples:
        raise AgentrtError("no workflows to train a predictor on")
    if not 0.0 <= holdout < 1.0:
        raise AgentrtError(f"holdout must be in [0, 1), got {holdout}")
    train, held = split_samples(samples, holdout, seed)
    return fit_and_evaluate(kind, train, held, horizon, seed, **opts)


def save_dict(d: dict, path: str | Path) -> None:
    import torch
    p = Path(path)
    if p.parent and not p.parent.exists():
        p.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"format": FORMAT, **d}, p)


def save_predictor(predictor, path: str | Path, provenance: dict | None = None) -> None:
    """Save `predictor`, with the provenance of its training data when known."""
    d = predictor.to_dict()
    if provenance is not None:
        d["provenance"] = provenance
    save_dict(d, path)


def load_predictor(path: str | Path):
    """The predictor saved at `path`, of whichever kind it is; its `provenance` attribute holds
    what it was trained on (None for a file that does not record it)."""
    d = load_dict(path)
    pred = _class(d.get("kind", "")).from_dict(d)
    pred.provenance = d.get("provenance")
    return pred


def load_dict(path: str | Path) -> dict:
    """The plain dict of a predictor file (checked to be one)."""
    p = Path(path)
    if not p.is_file():
        raise AgentrtError(f"{path}: no such predictor file")
    try:
        import torch
    except ModuleNotFoundError:
        raise AgentrtError("loading a predictor needs torch, which is not installed") from None
    try:
        d = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises many types for a file that is not its own
        raise AgentrtError(f"{path}: not a predictor file ({type(e).__name__})") from None
    if not isinstance(d, dict) or d.get("format") != FORMAT:
        raise AgentrtError(f"{path}: not a predictor file (expected format {FORMAT})")
    return d

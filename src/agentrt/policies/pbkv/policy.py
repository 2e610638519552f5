"""PBKV: lifecycle-aware eviction, K-step lookahead reuse score, conservative prefetch.

Model (after the PBKV paper)
- Lifecycle-aware eviction (`pbkv-lae`): a block whose every user workflow has finished is
  retired and scores zero: retired blocks go first (LRU among them), then active blocks by LRU.
- Hierarchical eviction (`pbkv-he`): active blocks are ranked by the lookahead reuse score
      Score(c) = sum_{k=1..K} gamma^(k-1) sum_{w in W_act(c)} s_w^(k) A_w(c) P_w^(k)
  where the predictor's joint output out[w, k, a] = s_w^(k) P_w^(k)(a) is summed over the agents
  `a` of w that used c (the block's threads). Each thread's sum over k is cached on the thread
  and refreshed, batched, only for workflows whose state changed. Retired blocks still go first.
- Conservative prefetch (`pbkv`): between iterations, only when the last iteration was
  decode-only and the PCIe link is idle, load host-tier blocks of the threads most likely to run
  next (ranked greedily by the one-step value out[w, 1, a]), within what the link moves in one
  iteration, into free GPU blocks or retired cache only: never evicting active cache.
- Aggressive prefetch (`pbkv-aggressive`, an ablation): prefetches every step, regardless of
  PCIe or batch state, and may evict any block scoring below the prefetched thread.
- Robustness: `predictor_noise` E blends each predicted row with a random distribution,
  (1 - E) p + E q, q ~ Dirichlet(1), seeded; E = 1 is pure noise.
The predictor is any `WorkflowPredictor` (agentrt.predict); without one (or untrained) every
active block scores 0, so `pbkv-he` degrades exactly to `pbkv-lae`.
Where the published rule loses (kept as published; docs/notes/results-details.md, "Long coding-agent
sessions"): a block stays active while any agent that used it may be called again, and its score
sums those agents' values. When a context is compacted, its old history was read by the main
agent and by the compaction call, so it scores both and outranks the live context of every other
session until its workflow ends, though no call reads it again; and live sessions rank by
predicted steps, not by when their next call comes, so one that just went idle on a short tool
can go before one whose subagents run for minutes. On long coding sessions that compact this
puts `pbkv-he` (and `pbkv`, whose eviction it is) below LRU; the runtime's LRU safety net
(`runtime/safety_net.py`) then ranks by LRU while it loses. PBKV-TA's dead-branch untagging and
time-aware densities are agentrt's answer to both (`time_aware.py`).
Without torch_geometric (the `gnn` extra) a policy asked to train a GraphSAGE or R-GCN predictor
says so (`SetupWarning`) and trains the Markov predictor instead (PBKV-TA also keeps its
online forecasts, `time_aware.py`).
"""

from __future__ import annotations

import numpy as np

from agentrt.predict.base import PathState
from agentrt.runtime import events as ev
from agentrt.runtime.actions import Prefetch
from agentrt.runtime.state import threads_of
from agentrt.runtime.policy import Policy, Prediction

RETIRED_ONLY = (1,)   # a key bound: (0, ...) retired keys are below it, (1, ...) active keys are not


class PBKVLAEPolicy(Policy):
    name = "pbkv-lae"
    description = "PBKV lifecycle-aware eviction: finished workflows' blocks first, then LRU"
    dynamic = True
    wants_events = True
    needs_tags = True

    def __init__(self, seed: int = 0) -> None:
        super().__init__(seed)

    def observe(self, e) -> None:
        if type(e) is ev.WorkflowEnded:
            self.epoch += 1

    @staticmethod
    def retired(block) -> bool:
        tag = block.meta
        if tag is None:
            return True
        for th in threads_of(tag):
            if not th.workflow.ended:
                return False
        return True

    def score(self, block):
        return (0, block.last_touch) if self.retired(block) else (1, 0.0, block.last_touch)


class PBKVHEPolicy(PBKVLAEPolicy):
    name = "pbkv-he"
    description = ("PBKV hierarchical eviction (as published): retired first, then the K-step lookahead "
                   "reuse score; below LRU where contexts are compacted (docs/notes/results-details.md)")

    def __init__(self, predictor=None, predictor_kind: str = "graphsage", gamma: float = 0.8,
                 predictor_noise: float = 0.0, horizon: int = 4, seed: int = 0,
                 train_epochs: int | None = None) -> None:
        super().__init__(seed)
        if not 0.0 < gamma <= 1.0:
            raise ValueError(f"gamma must be in (0, 1], got {gamma}")
        if not 0.0 <= predictor_noise <= 1.0:
            raise ValueError(f"predictor_noise must be in [0, 1], got {predictor_noise}")
        if isinstance(predictor, str):
            from agentrt.predict.io import load_predictor
            predictor = load_predictor(predictor)
        self.predictor = predictor
        self.predictor_kind = predictor_kind
        self.gamma = gamma
        self.noise = predictor_noise
        self.horizon = horizon
        self.train_epochs = train_epochs
        self._rng = np.random.default_rng(seed)
        self._dirty: dict[str, None] = {}    # an insertion-ordered set: batches in event order
        self._out: dict[str, np.ndarray] = {}      # workflow -> (K, V+1) latest prediction
        self._index: dict[str, int] = {}
        self._weights = None
        if predictor is not None:
            self.use_predictor(predictor)

    @property
    def needs_training(self) -> bool:  # type: ignore[override]
        return self.predictor is None

    def use_predictor(self, predictor) -> None:
        self.predictor = predictor
        self._index = {a: i for i, a in enumerate(predictor.agents)}
        self._weights = self.gamma ** np.arange(predictor.horizon)

    def _kind(self) -> str:
        """The predictor kind to train: the one asked for, or markov without torch_geometric."""
        from agentrt.predict.io import GNN_INSTALL, NEURAL_KINDS, gnn_missing
        missing = gnn_missing() if self.predictor_kind in NEURAL_KINDS else None
        if missing is None:
            return self.predictor_kind
        import warnings

        from agentrt.errors import SetupWarning
        warnings.warn(f"{self.name}: the {self.predictor_kind} predictor needs torch_geometric "
                      f"({missing} is not installed: {GNN_INSTALL}); {self.name} trains the markov "
                      f"predictor instead", SetupWarning, stacklevel=3)
        return "markov"

    def train(self, calls, block_size: int = 16) -> None:
        from agentrt.predict.io import train_predictor
        from agentrt.predict.samples import samples_from_calls
        kind = self._kind()
        samples = samples_from_calls(calls, block_size)
        if not samples:
            return
        opts = {} if self.train_epochs is None else {"epochs": self.train_epochs}
        # the bench already held out its own split; early stopping keeps an internal one
        predictor, _ = train_predictor(kind, samples, self.horizon, seed=self.seed,
                                       holdout=0.0, **opts)
        self.use_predictor(predictor)

    # ------------------------------------------------------------------ observe
    def observe(self, e) -> None:
        t = type(e)
        if t is ev.CallArrived or t is ev.CallFinished:
            if not e.call.warmup:
                self._dirty[e.call.key] = None
                self.epoch += 1
        elif t is ev.WorkflowEnded:
            self._dirty.pop(e.key, None)
            self._out.pop(e.key, None)
            self.epoch += 1

    def _predict_dirty(self) -> list:
        """Predict, in one batch, for the live workflows whose state changed: [(workflow, out)].

        Each workflow's latest prediction is kept in `_out`; the dirty set is cleared.
        """
        if not self._dirty or self.predictor is None:
            self._dirty.clear()
            return []
        wfs = [self.runtime.workflows[w] for w in self._dirty if w in self.runtime.workflows]
        self._dirty.clear()
        wfs = [w for w in wfs if w.path]
        if not wfs:
            return []
        out = self.predictor.predict_batch([PathState(list(w.path), w.signal) for w in wfs])
        if self.noise > 0:
            q = self._rng.dirichlet(np.ones(out.shape[2]), size=out.shape[:2])
            out = (1.0 - self.noise) * out + self.noise * q
        for w, o in zip(wfs, out):
            self._out[w.key] = o
        return list(zip(wfs, out))

    def _refresh(self) -> None:
        """Predict for the workflows whose state changed; cache their threads' lookahead values."""
        weights = self._weights
        idx = self._index
        for w, o in self._predict_dirty():
            values = weights @ o                      # (V+1,): sum_k gamma^(k-1) out[k, a]
            for agent, th in w.threads.items():
                i = idx.get(agent)
                th.value = float(values[i]) if i is not None else 0.0

    def score(self, block):
        if self._dirty:
            self._refresh()
        tag = block.meta
        s = 0.0
        active = False
        if tag is not None:
            for th in threads_of(tag):
                if not th.workflow.ended:
                    active = True
                    s += th.value
        if not active:
            return (0, block.last_touch)
        return (1, s, block.last_touch)

    def predict(self, horizon: int) -> dict[tuple[str, str], Prediction]:
        self._refresh()
        agents = self.predictor.agents if self.predictor is not None else []
        out = {}
        for wid, o in self._out.items():
            k = min(horizon, o.shape[0])
            steps = [{a: float(o[j, i]) for i, a in enumerate(agents)} for j in range(k)]
            out[wid] = Prediction(wid[1], steps, [float(o[j, -1]) for j in range(k)])
        return out

    def state_bytes(self) -> int:
        return sum(o.nbytes + 100 for o in self._out.values()) + 64 * len(self._dirty)


class PBKVPolicy(PBKVHEPolicy):
    name = "pbkv"
    description = ("PBKV full system (as published): pbkv-he's eviction + conservative host-to-GPU "
                   "prefetch; below LRU where contexts are compacted, as pbkv-he")
    acts = True
    aggressive = False

    def act(self, now: float, view) -> list:
        if view.host_blocks == 0 or self.predictor is None:
            return []
        if not self.aggressive and not (view.pcie_idle and view.decode_only):
            return []
        self._refresh()
        budget = view.pcie_blocks_per_iteration if not self.aggressive else 1 << 30
        if budget <= 0:
            return []
        cands = []
        idx = self._index
        for wf in self.runtime.between_calls.values():
            o = self._out.get(wf.key)
            if wf.running or o is None:
                continue
            for agent, th in wf.threads.items():
                i = idx.get(agent)
                if i is None:
                    continue
                p1 = float(o[0, i])
                if p1 > 0.0 and th.last_node is not None and view.on_host(th.last_node):
                    cands.append((p1, th.value, wf.key, th))
        cands.sort(key=lambda c: (-c[0], -c[1], c[2]))
        out = []
        for p1, value, _, th in cands:
            if budget <= 0:
                break
            bound = (1, value, -1) if self.aggressive else RETIRED_ONLY
            n = min(budget, view.host_blocks_on_path(th.last_node))
            out.append(Prefetch(th.workflow.tenant, th.last_node, n, bound, self.name))
            budget -= n
        return out


class PBKVAggressivePolicy(PBKVPolicy):
    name = "pbkv-aggressive"
    description = "PBKV with aggressive prefetch (ablation): any time, may evict active cache"
    aggressive = True

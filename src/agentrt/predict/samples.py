"""Training data for workflow predictors: samples from traces, a seeded split, the K-step dataset.

A `WorkflowSample` is one workflow's agents and signals in call order (the order of the trace
file, which the format guarantees is issue order; a call's agent is `call_agent`, exactly as the
runtime names it). Grouping keeps only agent names and signals per open workflow, never the
calls' hash ids, so memory follows the samples returned plus the workflows still open.

Dataset expansion: a workflow with agents a_1..a_n gives, for every prefix t = 1..n, the state
PathState(path=a_1..a_t, signal=s_t) (the path cut to its last `max_path` agents, as the runtime
keeps it) and targets a_{t+1}..a_{t+K}, with END wherever t + k > n. `evaluate` scores any
predictor on those targets: top-1 over agents + END and log loss (probabilities floored at
`PROB_FLOOR`, so an outcome the predictor cannot name, e.g. an agent unseen in training, costs
-log(PROB_FLOOR) rather than infinity).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from agentrt.predict.base import END, PathState, StepMetrics, WorkflowSample
from agentrt.trace.schema import Call

PROB_FLOOR = 1e-6
MAX_PATH = 64   # the runtime keeps the last 64 agents of a workflow's path


@dataclass(slots=True)
class Expansion:
    """The (state, K targets) dataset of a list of samples."""
    states: list[PathState]
    targets: list[list[str]]      # per state, K agent names or END
    workflow: list[int]           # per state, the index of its sample


def samples_from_calls(calls: Iterable[Call], block_size: int, *, anchor_tokens: int = 256,
                       max_workflows: int | None = None) -> list[WorkflowSample]:
    """Group calls by workflow, in order of each workflow's first call.

    A workflow is complete at its `last` call; one never marked last is complete at the end of
    the input. With `max_workflows`, reading stops once that many workflows are complete and no
    workflow is still open among the first `max_workflows` ones.
    """
    from agentrt.runtime.identity import call_agent

    order: dict[str, int] = {}
    open_: dict[str, WorkflowSample] = {}
    done: list[tuple[int, WorkflowSample]] = []
    for c in calls:
        s = open_.get(c.workflow)
        if s is None:
            if max_workflows is not None and len(order) >= max_workflows:
                if not open_:
                    break
                continue
            order[c.workflow] = len(order)
            s = open_[c.workflow] = WorkflowSample(c.workflow, [], [])
        s.agents.append(call_agent(c, block_size, anchor_tokens))
        s.signals.append(list(c.signal) if c.signal is not None else None)
        if c.last:
            done.append((order[c.workflow], open_.pop(c.workflow)))
    done.extend((order[w], s) for w, s in open_.items())
    done.sort(key=lambda p: p[0])
    return [s for _, s in done]


def samples_from_trace(path: str | Path, **kw) -> list[WorkflowSample]:
    from agentrt.trace.reader import TraceReader
    reader = TraceReader(path)
    return samples_from_calls(iter(reader), reader.header.block_size, **kw)


def samples_from_workload(name: str, workflows: int, seed: int = 0, **cfg) -> list[WorkflowSample]:
    """Generate a workload in memory (`cfg`: further GenConfig fields, e.g. noise)."""
    from agentrt.workloads.base import GenConfig
    from agentrt.workloads.registry import get_workload
    wl = get_workload(name)
    gen = GenConfig(workflows=workflows, seed=seed, **cfg)
    return samples_from_calls(wl.generate(gen), gen.block_size)


def split_samples(samples: list[WorkflowSample], holdout: float, seed: int = 0
                  ) -> tuple[list[WorkflowSample], list[WorkflowSample]]:
    """(train, held-out) by workflow: a seeded permutation, `holdout` of it held out.

    Both parts are non-empty when there are two samples or more and 0 < holdout < 1.
    """
    if not 0.0 <= holdout < 1.0:
        raise ValueError(f"holdout must be in [0, 1), got {holdout}")
    n = len(samples)
    k = int(round(holdout * n))
    if holdout > 0 and n >= 2:
        k = min(max(k, 1), n - 1)
    perm = np.random.default_rng(seed).permutation(n)
    held = set(perm[:k].tolist())
    return ([s for i, s in enumerate(samples) if i not in held],
            [s for i, s in enumerate(samples) if i in held])


def iter_states(sample: WorkflowSample, horizon: int, max_path: int = MAX_PATH
                ) -> Iterator[tuple[PathState, list[str]]]:
    """Every prefix of one workflow as (state, K targets)."""
    a = sample.agents
    sig = sample.signals
    n = len(a)
    for t in range(1, n + 1):
        state = PathState(a[max(0, t - max_path):t], sig[t - 1] if t - 1 < len(sig) else None)
        yield state, [a[t + k - 1] if t + k - 1 < n else END for k in range(1, horizon + 1)]


def expand(samples: list[WorkflowSample], horizon: int, max_path: int = MAX_PATH) -> Expansion:
    ex = Expansion([], [], [])
    for i, s in enumerate(samples):
        for state, targets in iter_states(s, horizon, max_path):
            ex.states.append(state)
            ex.targets.append(targets)
            ex.workflow.append(i)
    return ex


def target_matrix(targets: list[list[str]], agents: list[str]) -> np.ndarray:
    """Targets as indices into agents + END (END -> V; an unknown agent -> -1)."""
    idx = {a: i for i, a in enumerate(agents)}
    idx[END] = len(agents)
    if not targets:
        return np.zeros((0, 0), dtype=np.int64)
    return np.array([[idx.get(t, -1) for t in row] for row in targets], dtype=np.int64)


def evaluate(predictor, samples: list[WorkflowSample], batch: int = 1024) -> list[StepMetrics]:
    """Per-step top-1 accuracy and log loss of `predictor` on every prefix of `samples`."""
    ex = expand(samples, predictor.horizon)
    k_steps = predictor.horizon
    if not ex.states:
        return [StepMetrics(k + 1, math.nan, math.nan, 0) for k in range(k_steps)]
    y = target_matrix(ex.targets, predictor.agents)
    hits = np.zeros(k_steps)
    nll = np.zeros(k_steps)
    for lo in range(0, len(ex.states), batch):
        out = predictor.predict_batch(ex.states[lo:lo + batch])
        yb = y[lo:lo + batch]
        known = yb >= 0
        p = np.take_along_axis(out, np.where(known, yb, 0)[:, :, None], axis=2)[:, :, 0]
        p = np.where(known, p, 0.0)
        hits += ((out.argmax(axis=2) == yb) & known).sum(axis=0)
        nll += -np.log(np.maximum(p, PROB_FLOOR)).sum(axis=0)
    n = len(ex.states)
    return [StepMetrics(k + 1, float(hits[k] / n), float(nll[k] / n), n) for k in range(k_steps)]

"""Where a bench run's calls come from: a trace file, or a generated workload written to a file once.

Every policy replays the same file, so all of them see exactly the same calls. A source can hold
back its first `train_workflows` workflows (in order of first appearance) as a training split:
policies that learn offline train on those, and every policy is scored on the rest. The split's
size is `split_size(fraction)`, the one rule `agentrt bench` and `agentrt train` share; a bench
given a saved predictor also holds back every workflow the predictor was trained on
(`predictor_holdback`, from the provenance `agentrt train` records).
"""

from __future__ import annotations

import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from agentrt.engine.replay import FileCalls
from agentrt.errors import AgentrtError
from agentrt.trace.reader import TraceReader
from agentrt.trace.schema import Call, TraceHeader
from agentrt.trace.writer import write_trace
from agentrt.workloads.base import GenConfig
from agentrt.workloads.registry import get_workload


@dataclass(slots=True)
class TraceSource:
    label: str            # what the JSON's "trace" field says
    path: Path
    header: TraceHeader
    calls: int            # calls in the file
    workflows: int        # workflows in the file
    train_workflows: int = 0
    _tmp: tempfile.TemporaryDirectory | None = None
    agent_calls: int = -1   # calls that name their agent (-1: not counted)
    agent_names: frozenset = frozenset()   # the agents calls name (at most MAX_AGENT_NAMES kept)
    # predictors trained on this source's split, shared by the policies asking for the same one
    # (per source, not per process, so no run sees what another run trained)
    trained: dict = field(default_factory=dict)
    _digests: list[str] | None = None

    def reader(self) -> TraceReader:
        return TraceReader(self.path)

    def split_size(self, fraction: float) -> int:
        """Workflows in a training split of `fraction`: the first int(workflows x fraction)."""
        if not 0.0 <= fraction < 1.0:
            raise AgentrtError(f"--train-fraction must be in [0, 1), got {fraction}")
        return int(self.workflows * fraction)

    def workflow_digests(self) -> list[str]:
        """Content digests of the workflows, in order of first appearance (computed once)."""
        if self._digests is None:
            from agentrt.predict.provenance import workflow_digests
            self._digests = workflow_digests(self.reader())
        return self._digests

    def _split(self, want_train: bool) -> Iterator[Call]:
        k = self.train_workflows
        if k <= 0:
            if not want_train:
                yield from self.reader()
            return
        train: set[str] = set()
        opened = 0
        open_train = 0
        seen: set[str] = set()   # workflows open right now (bounded by concurrency)
        for c in self.reader():
            if c.workflow not in seen:
                seen.add(c.workflow)
                opened += 1
                if opened <= k:
                    train.add(c.workflow)
                    open_train += 1
            is_train = c.workflow in train
            if c.last:
                seen.discard(c.workflow)
                if is_train:
                    open_train -= 1
            if is_train == want_train:
                yield c
            if want_train and opened >= k and open_train == 0:
                return

    def train_calls(self) -> Iterator[Call]:
        """The training split (empty when there is none)."""
        return self._split(True)

    def eval_calls(self) -> Iterator[Call]:
        """What every policy is scored on: the calls after the training split (their replay's
        errors name the file)."""
        return FileCalls(self._split(False), str(self.path))

    @property
    def eval_calls_count(self) -> int:
        return self.calls if self.train_workflows <= 0 else sum(1 for _ in self.eval_calls())

    def close(self) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None


MAX_AGENT_NAMES = 10_000


def _count(reader: TraceReader, names: set | None = None) -> tuple[int, int, int]:
    """(calls, workflows, calls naming their agent), validating every line on the way; the
    agent names go into `names` (up to MAX_AGENT_NAMES) when given."""
    calls = workflows = agents = 0
    open_wfs: set[str] = set()
    for c in reader:
        calls += 1
        if c.agent is not None:
            agents += 1
            if names is not None and len(names) < MAX_AGENT_NAMES:
                names.add(c.agent)
        if c.workflow not in open_wfs:
            workflows += 1
            open_wfs.add(c.workflow)
        if c.last:
            open_wfs.discard(c.workflow)
    return calls, workflows, agents


def file_source(path: str | Path) -> TraceSource:
    """A trace file; the whole file is validated once up front, so a bad line stops the run early."""
    reader = TraceReader(path)
    names: set = set()
    calls, workflows, agents = _count(reader, names)
    if calls == 0:
        raise AgentrtError(f"{path}: the trace has no calls (an empty file, or a header alone): "
                           f"nothing to replay")
    return TraceSource(str(path), Path(path), reader.header, calls, workflows, agent_calls=agents,
                       agent_names=frozenset(names))


def workload_source(name: str, cfg: GenConfig) -> TraceSource:
    wl = get_workload(name)
    tmp = tempfile.TemporaryDirectory(prefix="agentrt-")
    path = Path(tmp.name) / f"{name}.jsonl"
    write_trace(path, wl.header(cfg), wl.generate(cfg))
    reader = TraceReader(path)
    names: set = set()
    calls, workflows, agents = _count(reader, names)
    return TraceSource(f"workload:{name} (workflows={cfg.workflows}, seed={cfg.seed})", path,
                       reader.header, calls, workflows, 0, tmp, agents, frozenset(names))


class BenchWarning(UserWarning):
    """A result that stands, with a caveat the user should read (printed on stderr)."""


def warn_no_identity(source: TraceSource, agent_aware: list[str]) -> str | None:
    """Warn when agent-aware policies run on a trace whose calls never name their agent."""
    if source.agent_calls != 0 or not agent_aware:
        return None
    msg = (f"{source.label}: no call names its agent, so {', '.join(agent_aware)} will see agents "
           f"inferred from prompt anchors (the hash of each prompt's leading tokens, i.e. its "
           f"system prompt), not the framework's own agents")
    warnings.warn(msg, BenchWarning, stacklevel=2)
    return msg


def predictor_holdback(source: TraceSource, paths: list[str], held: int) -> tuple[int, list[str]]:
    """Workflows to hold back so that no scored workflow was in a saved predictor's training set.

    `held`: the workflows the bench already holds back. A predictor that recorded its training
    workflows (`agentrt train`) and was trained on some of this trace's workflows pushes the split
    past the last of them (the split is always a prefix, so it then covers the predictor's
    training split). Returns (workflows to hold back, notes for the result's config).
    """
    from agentrt.predict.io import load_dict
    from agentrt.predict.provenance import provenance_in
    notes: list[str] = []
    for path in paths:
        saved = load_dict(path)          # once: the agents it knows and what it was trained on
        _warn_foreign_predictor(source, path, saved.get("agents") or [])
        prov = provenance_in(saved)
        if prov is None:
            warnings.warn(f"predictor {path} does not record what it was trained on (saved by an "
                          f"older agentrt): cannot check that the scored workflows are not among its "
                          f"training workflows; retrain it with `agentrt train`", BenchWarning,
                          stacklevel=2)
            continue
        seen = set(prov["train_digests"])
        last = max((i for i, d in enumerate(source.workflow_digests()) if d in seen), default=-1)
        trained_on = f"{prov['train_workflows']} workflows of {prov['trace']}"
        if last < 0:
            notes.append(f"predictor {path} was trained on {trained_on}, none of them in this trace")
        elif last < held:
            notes.append(f"predictor {path} was trained on {trained_on}, all within the held-back split")
        elif last + 1 >= source.workflows:
            raise AgentrtError(f"predictor {path} was trained on {trained_on}, among them the last "
                               f"workflow of {source.label}: no workflow is left to score it on "
                               f"(retrain it with a smaller --train-fraction, or bench another trace)")
        else:
            held = last + 1
            notes.append(f"predictor {path} was trained on {trained_on}, the last of them workflow "
                         f"{held} of this trace: the first {held} workflows are held back and "
                         f"every policy is scored on the rest")
    return held, notes


def _warn_foreign_predictor(source: TraceSource, path: str, known: list) -> None:
    """Warn when a saved predictor knows none of the agents this trace names: its forecasts then
    cover no call (PBKV-HE ranks as PBKV-LAE; PBKV-TA forecasts from its online model)."""
    if source.agent_names and not set(known) & source.agent_names:
        shown = ", ".join(sorted(map(str, known))[:8]) + (", ..." if len(known) > 8 else "")
        what = f"it knows: {shown}" if known else "it knows no agent at all"
        warnings.warn(f"predictor {path} knows none of the agents of {source.label} ({what}): its "
                      f"forecasts cover no call; train one on this application (`agentrt train`)",
                      BenchWarning, stacklevel=3)

"""Where a bench run's calls come from: a trace file, or a generated workload written to a file once.

Every policy replays the same file, so all of them see exactly the same calls. A source can hold
back its first `train_workflows` workflows (in order of first appearance) as a training split:
policies that learn offline train on those, and every policy is scored on the rest.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

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

    def reader(self) -> TraceReader:
        return TraceReader(self.path)

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
        """What every policy is scored on: the calls after the training split."""
        return self._split(False)

    @property
    def eval_calls_count(self) -> int:
        return self.calls if self.train_workflows <= 0 else sum(1 for _ in self.eval_calls())

    def close(self) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None


def _count(reader: TraceReader) -> tuple[int, int]:
    """(calls, workflows), validating every line on the way."""
    calls = workflows = 0
    open_wfs: set[str] = set()
    for c in reader:
        calls += 1
        if c.workflow not in open_wfs:
            workflows += 1
            open_wfs.add(c.workflow)
        if c.last:
            open_wfs.discard(c.workflow)
    return calls, workflows


def file_source(path: str | Path) -> TraceSource:
    """A trace file; the whole file is validated once up front, so a bad line stops the run early."""
    reader = TraceReader(path)
    calls, workflows = _count(reader)
    return TraceSource(str(path), Path(path), reader.header, calls, workflows)


def workload_source(name: str, cfg: GenConfig) -> TraceSource:
    wl = get_workload(name)
    tmp = tempfile.TemporaryDirectory(prefix="agentrt-")
    path = Path(tmp.name) / f"{name}.jsonl"
    write_trace(path, wl.header(cfg), wl.generate(cfg))
    reader = TraceReader(path)
    calls, workflows = _count(reader)
    return TraceSource(f"workload:{name} (workflows={cfg.workflows}, seed={cfg.seed})", path,
                       reader.header, calls, workflows, 0, tmp)

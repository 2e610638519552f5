"""Where a bench run's calls come from: a trace file, or a generated workload written to a file once.

Every policy replays the same file, so all of them see exactly the same calls.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from agentrt.trace.reader import TraceReader
from agentrt.trace.schema import TraceHeader
from agentrt.trace.writer import write_trace
from agentrt.workloads.base import GenConfig
from agentrt.workloads.registry import get_workload


@dataclass(slots=True)
class TraceSource:
    label: str            # what the JSON's "trace" field says
    path: Path
    header: TraceHeader
    calls: int            # lines to replay (for progress)
    _tmp: tempfile.TemporaryDirectory | None = None

    def reader(self) -> TraceReader:
        return TraceReader(self.path)

    def close(self) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None


def _count_calls(reader: TraceReader) -> int:
    n = 0
    for _ in reader:
        n += 1
    return n


def file_source(path: str | Path) -> TraceSource:
    """A trace file; the whole file is validated once up front, so a bad line stops the run early."""
    reader = TraceReader(path)
    return TraceSource(str(path), Path(path), reader.header, _count_calls(reader))


def workload_source(name: str, cfg: GenConfig) -> TraceSource:
    wl = get_workload(name)
    tmp = tempfile.TemporaryDirectory(prefix="agentrt-")
    path = Path(tmp.name) / f"{name}.jsonl"
    n = write_trace(path, wl.header(cfg), wl.generate(cfg))
    return TraceSource(f"workload:{name} (workflows={cfg.workflows}, seed={cfg.seed})", path,
                       TraceReader(path).header, n, tmp)

"""The simulator from Python: `agentrt.simulate(...)`, for notebooks and scripts.

    import agentrt
    res = agentrt.simulate("coding", policies=["lru", "cachesage", "pbkv-lae", "belady"],
                           workflows=50, gpu_blocks=4000)
    res.to_frame()          # a pandas DataFrame, one row per policy (records without pandas)
    res["cachesage"]["hit_rate"]

It runs exactly what `agentrt bench` runs (`agentrt.bench.runner.run_bench`) and keeps its JSON
document (`res.doc`, the `--json` schema): hit rates are fractions, times in seconds. The
defaults are `agentrt bench`'s: a generated workload of 200 workflows replayed 16 at a time.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from agentrt.errors import AgentrtError

WORKLOAD_WORKFLOWS = 200       # `agentrt bench --workload` defaults
WORKLOAD_CONCURRENCY = 16


@dataclass(frozen=True)
class SimResult:
    """One simulator run of several policies over one trace. `doc` is `agentrt bench --json`'s
    document; the rest reads it."""
    doc: dict

    @property
    def policies(self) -> list[str]:
        return list(self.doc["results"])

    @property
    def config(self) -> dict:
        return self.doc["config"]

    def __getitem__(self, policy: str) -> dict:
        return self.doc["results"][policy]

    def records(self) -> list[dict]:
        """One flat dict per policy, in the order asked: {"policy": name, metric: value, ...};
        bounds carry `bound` (and `offline`) = True and None for the timings they do not have."""
        out = []
        for name, r in self.doc["results"].items():
            row = {"policy": name}
            for k, v in r.items():
                if isinstance(v, dict):
                    row.update({f"{k}.{kk}": vv for kk, vv in v.items()})
                else:
                    row[k] = v
            row.setdefault("bound", False)
            row.setdefault("offline", False)
            out.append(row)
        return out

    def to_frame(self):
        """A pandas DataFrame indexed by policy; without pandas installed, `records()` and a
        warning saying so (pandas is optional: pip install pandas, or agentrt[pandas])."""
        try:
            import pandas as pd
        except ImportError:
            warnings.warn("pandas is not installed: to_frame() returns a list of dicts "
                          "(pip install pandas for a DataFrame)", RuntimeWarning, stacklevel=2)
            return self.records()
        return pd.DataFrame.from_records(self.records()).set_index("policy")

    def table(self, width: int = 160) -> str:
        """The table `agentrt bench` prints, as text."""
        from rich.console import Console

        from agentrt.bench.report import print_result
        console = Console(width=width, record=True, file=open(os.devnull, "w"), color_system=None)
        print_result(self.doc, console)
        return console.export_text()

    def plot(self, path: str | Path) -> Path:
        """The PNG `agentrt bench --plot` writes."""
        from agentrt.bench.report import plot_result
        plot_result(self.doc, Path(path))
        return Path(path)

    def to_json(self, path: str | Path) -> Path:
        """Write `doc` as `agentrt bench --json` does."""
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(self.doc, indent=2))
        return Path(path)

    def __repr__(self) -> str:
        rates = ", ".join(f"{p}={r['hit_rate']:.1%}" for p, r in self.doc["results"].items())
        return f"SimResult({self.doc['trace']}: {self.doc['calls']} calls; hit rate {rates})"


def _source(trace_or_workload, workflows: int, seed: int, concurrency: int | None,
            tool_scale: float):
    """(TraceSource, whether we own it): a trace file, a workload name, or a TraceSource."""
    from agentrt.bench.source import TraceSource, file_source, workload_source
    from agentrt.workloads.base import GenConfig
    from agentrt.workloads.registry import workload_names
    src = trace_or_workload
    if isinstance(src, TraceSource):
        return src, False
    if isinstance(src, os.PathLike) or (isinstance(src, str) and Path(src).is_file()):
        if not Path(src).is_file():
            raise AgentrtError(f"trace {src}: no such file")
        return file_source(src), True
    if isinstance(src, str) and src in workload_names():
        if workflows <= 0:
            raise AgentrtError(f"workflows must be > 0, got {workflows}")
        if tool_scale <= 0:
            raise AgentrtError(f"tool_scale must be > 0, got {tool_scale}")
        cfg = GenConfig(workflows=workflows, seed=seed, tool_scale=tool_scale,
                        concurrency=concurrency or WORKLOAD_CONCURRENCY)
        return workload_source(src, cfg), True
    raise AgentrtError(f"{src!r} is neither a trace file nor a workload; workloads: "
                       f"{', '.join(workload_names())}")


def simulate(trace_or_workload, policies: Sequence[str] | str = ("lru", "cachesage", "pbkv-lae", "belady"),
             *, scheduler: str = "fcfs", gpu_blocks: int | None = None, host_blocks: int = 0,
             preset: str = "llama3.1-8b-h100", concurrency: int | None = None,
             workflows: int = WORKLOAD_WORKFLOWS, seed: int = 0, tool_scale: float = 1.0,
             time_scale: float = 1.0, train: str | Path | None = None,
             train_fraction: float | None = None, policy_options: dict | None = None,
             scheduler_options: dict | None = None) -> SimResult:
    """Replay a trace (a path, or a workload name from `agentrt workloads`, generated with
    `workflows`, `seed`, `tool_scale`) once per policy through the simulator.

    `policies`: names from `agentrt policies` (a list or "a,b,c"); the bounds `oracle`, `belady`,
    `infinite` may be among them. `gpu_blocks` / `host_blocks`: KV capacity in blocks (default:
    what the preset's GPU memory holds). `concurrency`: workflows at once, closed loop (default:
    the trace's; 16 for a workload). `train` / `train_fraction`: the training split of policies
    that learn offline (`agentrt bench --train`, `--train-fraction`). `policy_options`:
    {policy: {option: value}}, as `--set`. Raises `AgentrtError` on a bad name or value, before
    any replay."""
    from agentrt.bench.runner import BenchOptions, run_bench
    names = [p.strip() for p in policies.split(",")] if isinstance(policies, str) else list(policies)
    names = [p for p in names if p]
    if not names:
        raise AgentrtError("no policies given")
    if gpu_blocks is not None and gpu_blocks <= 0:
        raise AgentrtError(f"gpu_blocks must be > 0, got {gpu_blocks}")
    if host_blocks < 0:
        raise AgentrtError(f"host_blocks must be >= 0, got {host_blocks}")
    if time_scale <= 0:
        raise AgentrtError(f"time_scale must be > 0, got {time_scale}")
    if concurrency is not None and concurrency <= 0:
        raise AgentrtError(f"concurrency must be > 0, got {concurrency}")
    popts = {k: dict(v) for k, v in (policy_options or {}).items()}
    unknown = sorted(set(popts) - set(names))
    if unknown:
        raise AgentrtError(f"policy_options for {', '.join(unknown)}: not among the policies")
    opts = BenchOptions(preset=preset, gpu_blocks=gpu_blocks, host_blocks=host_blocks,
                        concurrency=concurrency, seed=seed, time_scale=time_scale,
                        train_fraction=train_fraction, train_path=str(train) if train else None,
                        policy_options=popts, scheduler=scheduler,
                        scheduler_options=dict(scheduler_options or {}))
    source, owned = _source(trace_or_workload, workflows, seed, concurrency, tool_scale)
    try:
        return SimResult(run_bench(source, names, opts))
    finally:
        if owned:
            source.close()


def compare(results: Iterable[SimResult], metric: str = "hit_rate") -> list[dict]:
    """One row per run of several results (e.g. a sweep over `gpu_blocks`): the run's config
    values that differ between the runs, then `metric` per policy."""
    results = list(results)
    keys = [k for k in results[0].config if any(r.config.get(k) != results[0].config.get(k)
                                                for r in results)] if results else []
    rows = []
    for r in results:
        row = {k: r.config.get(k) for k in keys}
        row.update({p: v.get(metric) for p, v in r.doc["results"].items()})
        rows.append(row)
    return rows

"""The simulator from Python: `agentrt.simulate(...)`, for notebooks and scripts.

    import agentrt
    res = agentrt.simulate("coding", policies=["lru", "cachesage", "pbkv-lae", "belady"],
                           workflows=50, gpu_blocks=4000)
    res.to_frame()          # a pandas DataFrame, one row per policy (records without pandas)
    res["cachesage"]["hit_rate"]

It runs exactly what `agentrt bench` runs (`agentrt.bench.spec.BenchSpec`: the same checks,
then `agentrt.bench.runner.run_bench`) and keeps its JSON document (`res.doc`, the `--json`
schema of docs/output.md): hit rates are fractions, times in seconds. The defaults are the ones
every command shares (agentrt.defaults): a generated workload of 200 workflows replayed 16 at a
time.
"""

from __future__ import annotations

import numbers
import os
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from agentrt import defaults
from agentrt.errors import AgentrtError


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
        bounds carry `bound` (and `offline`) = True and None for the timings they do not have;
        nested values (per-tenant metrics) as dotted keys, as in `--csv`."""
        from agentrt.bench.output import records
        return records(self.doc)

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
        from agentrt.bench.plot import image_suffixes
        from agentrt.bench.report import plot_result
        from agentrt.checks import output_file
        plot_result(self.doc, output_file(path, "plot", image_suffixes()))
        return Path(path)

    def to_json(self, path: str | Path) -> Path:
        """Write `doc` as `agentrt bench --json` does."""
        from agentrt.bench.output import write_json
        from agentrt.checks import output_file
        return write_json(self.doc, output_file(path, "to_json", (".json",)))

    def to_csv(self, path: str | Path) -> Path:
        """Write the table as `agentrt bench --csv` does."""
        from agentrt.bench.output import write_csv
        from agentrt.checks import output_file
        return write_csv(self.doc, output_file(path, "to_csv", (".csv",)))

    def __repr__(self) -> str:
        rates = ", ".join(f"{p}={r['hit_rate']:.1%}" for p, r in self.doc["results"].items())
        return f"SimResult({self.doc['trace']}: {self.doc['calls']} calls; hit rate {rates})"


def _spec_source(spec, src) -> None:
    """Put a trace file, a workload name or a TraceSource into `spec`."""
    from agentrt.bench.source import TraceSource
    from agentrt.workloads.registry import workload_names
    if isinstance(src, TraceSource):
        spec.source = src
    elif isinstance(src, os.PathLike) or (isinstance(src, str) and Path(src).exists()):
        spec.trace = Path(src)
    elif isinstance(src, str) and src in workload_names():
        spec.workload = src
    else:
        raise AgentrtError(f"{src!r} is neither a trace file nor a workload; workloads: "
                           f"{', '.join(workload_names())}")


def _check_types(**values) -> dict:
    """name=(value, int or float, None allowed) -> {name: value as a plain int or float}: a bool,
    a string or a fraction where a count is asked is an `AgentrtError` naming the argument (the
    range checks come after, in `BenchSpec.validate`). NumPy numbers pass, as Python's."""
    out = {}
    for name, (value, kind, optional) in values.items():
        if value is None and optional:
            out[name] = None
            continue
        ok = isinstance(value, numbers.Integral if kind is int else numbers.Real)
        if isinstance(value, bool) or not ok:
            want = "an integer" if kind is int else "a number"
            raise AgentrtError(f"{name} must be {want}, got {value!r}")
        out[name] = int(value) if kind is int else float(value)
    return out


def simulate(trace_or_workload, policies: Sequence[str] | str = defaults.API_POLICIES,
             *, scheduler: str = defaults.SCHEDULER, gpu_blocks: int | None = None,
             host_blocks: int = 0, preset: str = defaults.PRESET, concurrency: int | None = None,
             workflows: int = defaults.WORKFLOWS, seed: int = defaults.SEED, tool_scale: float = 1.0,
             time_scale: float = 1.0, train: str | Path | None = None,
             train_fraction: float | None = None, policy_options: dict | None = None,
             scheduler_options: dict | None = None, tool_hints: float | None = None,
             replicas: int = 1, router: str | None = None,
             transfer_gbps: float | None = None, cache_at: str = "prefill",
             retain_hints: float | None = None, retain_budget: float = 0.25) -> SimResult:
    """Replay a trace (a path, or a workload name from `agentrt workloads`, generated with
    `workflows`, `seed`, `tool_scale`) once per policy through the simulator.

    `policies`: names from `agentrt policies` (a list or "a,b,c"); the bounds `oracle`, `belady`,
    `infinite` may be among them. `gpu_blocks` / `host_blocks`: KV capacity in blocks (default:
    what the preset's GPU memory holds). `concurrency`: workflows at once, closed loop (default:
    the trace's; 16 for a workload). `train` / `train_fraction`: the training split of policies
    that learn offline (`agentrt bench --train`, `--train-fraction`). `policy_options`:
    {policy: {option: value}}, as `--set`. `tool_hints`: the framework announces each tool
    call's duration with this lognormal error (`--tool-hints`; None: it does not). `replicas` /
    `router`: that many simulated replicas, each with `gpu_blocks`, behind a router from `agentrt
    routers` (`--replicas`, `--router`; `oracle` is then the cluster oracle). `transfer_gbps`:
    the replicas copy cached prefixes from each other over a link of that many GB/s
    (`--transfer-gbps`; None: they do not). `cache_at`: when a computed prompt block becomes a
    hit for other calls, `"prefill"` (after its prefill, as SGLang) or `"schedule"` (when
    scheduled, as vLLM V1; `--cache-at`). `retain_hints` / `retain_budget`: the framework sends
    kv.retain for a tool call's context for the tool time it announces with this error, kept
    within this fraction of the GPU blocks (`--retain-hints`, `--retain-budget`). Raises
    `AgentrtError` on a bad name or value, before any replay (the checks of `agentrt bench`,
    `BenchSpec.validate`)."""
    from agentrt.bench.runner import BenchOptions
    from agentrt.bench.spec import BenchSpec
    v = _check_types(gpu_blocks=(gpu_blocks, int, True), host_blocks=(host_blocks, int, False),
                     concurrency=(concurrency, int, True), workflows=(workflows, int, False),
                     seed=(seed, int, False), replicas=(replicas, int, False),
                     tool_scale=(tool_scale, float, False), time_scale=(time_scale, float, False),
                     train_fraction=(train_fraction, float, True), tool_hints=(tool_hints, float, True),
                     retain_hints=(retain_hints, float, True), retain_budget=(retain_budget, float, False),
                     transfer_gbps=(transfer_gbps, float, True))
    gpu_blocks, host_blocks, concurrency, workflows = (v["gpu_blocks"], v["host_blocks"],
                                                       v["concurrency"], v["workflows"])
    seed, replicas, tool_scale, time_scale = v["seed"], v["replicas"], v["tool_scale"], v["time_scale"]
    train_fraction, tool_hints, transfer_gbps = v["train_fraction"], v["tool_hints"], v["transfer_gbps"]
    retain_hints, retain_budget = v["retain_hints"], v["retain_budget"]
    for name, value in (("policy_options", policy_options), ("scheduler_options", scheduler_options)):
        if value is not None and not isinstance(value, dict):
            raise AgentrtError(f"{name} must be a dict, got {type(value).__name__}")
    if policy_options and not all(isinstance(v, dict) for v in policy_options.values()):
        raise AgentrtError("policy_options must map each policy name to a dict of options")
    if not isinstance(policies, (str, list, tuple)):
        raise AgentrtError(f"policies must be a list of names or 'a,b,c', got {type(policies).__name__}")
    names = [p.strip() for p in policies.split(",")] if isinstance(policies, str) else list(policies)
    if not all(isinstance(p, str) for p in names):
        raise AgentrtError("policies must be names (strings)")
    opts = BenchOptions(preset=preset, gpu_blocks=gpu_blocks, host_blocks=host_blocks,
                        concurrency=concurrency, seed=seed, time_scale=time_scale,
                        train_fraction=train_fraction, train_path=str(train) if train else None,
                        policy_options={k: dict(v) for k, v in (policy_options or {}).items()},
                        scheduler=scheduler, scheduler_options=dict(scheduler_options or {}),
                        tool_hints=tool_hints, cache_at=cache_at, retain_hints=retain_hints,
                        retain_budget=retain_budget)
    spec = BenchSpec(policies=[p for p in names if p], workflows=workflows, tool_scale=tool_scale,
                     options=opts, cli=False, replicas=replicas, router=router,
                     transfer_gbps=transfer_gbps)
    _spec_source(spec, trace_or_workload)
    spec.validate()
    return SimResult(spec.run())


def compare(results: Iterable[SimResult], metric: str = "hit_rate") -> list[dict]:
    """One row per run of several results (e.g. a sweep over `gpu_blocks`): the run's config
    values that differ between the runs, then `metric` per policy."""
    results = list(results)
    if results and not any(metric in v for r in results for v in r.doc["results"].values()):
        known = sorted({k for r in results for v in r.doc["results"].values() for k in v})
        raise AgentrtError(f"no result has metric {metric!r}; metrics: {', '.join(known)}")
    keys = [k for k in results[0].config if any(r.config.get(k) != results[0].config.get(k)
                                                for r in results)] if results else []
    rows = []
    for r in results:
        row = {k: r.config.get(k) for k in keys}
        row.update({p: v.get(metric) for p, v in r.doc["results"].items()})
        rows.append(row)
    return rows

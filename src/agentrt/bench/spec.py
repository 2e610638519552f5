"""One simulator bench run as asked for, checked in one place before any work starts.

`BenchSpec` is what `agentrt bench` and `agentrt.simulate` are asked: where the calls come from (a
trace file, a workload generated with the shared defaults of agentrt.defaults, or an open
`TraceSource`), the policies, the runner's `BenchOptions`, and where results go. `validate()`
checks all of it and raises `AgentrtError` naming each option as the caller wrote it (`cli`:
`--gpu-blocks`, else `gpu_blocks`); nothing is generated, trained or replayed before it passes.
`run()` then opens the source, replays every policy, closes what it opened and notes an overloaded
open-loop replay (`overload.py`, the document's `overload`); `write()` writes
the JSON, CSV and figure asked for.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from agentrt import defaults
from agentrt.bench.overload import check_overload, overload_doc
from agentrt.bench.runner import BenchOptions, ProgressFactory, run_bench
from agentrt.bench.source import TraceSource, file_source, workload_source
from agentrt.errors import AgentrtError, unknown_name
from agentrt.checks import flag, input_file, output_file, positive


@dataclass(slots=True)
class BenchSpec:
    policies: list[str]
    trace: Path | None = None
    workload: str | None = None
    source: TraceSource | None = None     # an open source (Python API); run() leaves it open
    workflows: int = defaults.WORKFLOWS   # a generated workload's size
    tool_scale: float = 1.0               # a generated workload's tool and think times x this
    options: BenchOptions = field(default_factory=BenchOptions)
    json_path: Path | None = None
    csv_path: Path | None = None
    plot_path: Path | None = None
    replicas: int = 1                     # > 1: simulated replicas behind `router` (agentrt.cluster)
    router: str | None = None             # default with replicas > 1: agentrt.cluster's DEFAULT_ROUTER
    transfer_gbps: float | None = None    # replicas copy cached prefixes over a link this fast
    router_options: dict = field(default_factory=dict)   # the router's keyword options (--router-set)
    cli: bool = True                      # errors name command-line flags (else Python keywords)

    def validate(self) -> None:
        cli = self.cli
        given = [x for x in (self.trace, self.workload, self.source) if x is not None]
        if len(given) != 1:
            raise AgentrtError("give either --trace or --workload, not both" if cli
                               else "give one trace file, workload name or TraceSource")
        if self.trace is not None:
            input_file(self.trace, flag("trace", cli))
        if self.workload is not None:
            from agentrt.workloads.registry import workload_names
            if self.workload not in workload_names():
                raise unknown_name("workload", self.workload, workload_names())
            from agentrt.trace.limits import MAX_WORKFLOWS
            if not 0 < self.workflows <= MAX_WORKFLOWS:
                raise AgentrtError(f"{flag('workflows', cli)} must be from 1 to {MAX_WORKFLOWS:,} "
                                   f"(a generated workload is held in memory), got {self.workflows}")
            positive(self.tool_scale, "tool_scale", cli)
        self.options.validate(self.policies, cli)
        if self.replicas != 1 and self.options.retain_hints is not None:
            raise AgentrtError(f"{flag('retain_hints', cli)} is for one replica")
        if self.replicas != 1 or self.router is not None or self.transfer_gbps is not None:
            from agentrt.bench.cluster import check_cluster_run
            check_cluster_run(self.policies, self.replicas, self.router, cli, self.transfer_gbps)
        if self.json_path is not None:
            output_file(self.json_path, flag("json", cli), (".json",))
        if self.csv_path is not None:
            output_file(self.csv_path, flag("csv", cli), (".csv",))
        if self.plot_path is not None:
            from agentrt.bench.plot import image_suffixes
            output_file(self.plot_path, flag("plot", cli), image_suffixes())

    def gen_config(self):
        """The generator's config: the shared defaults, this run's seed, size and concurrency."""
        from agentrt.workloads.base import GenConfig
        return GenConfig(workflows=self.workflows, seed=self.options.seed, tool_scale=self.tool_scale,
                         concurrency=self.options.concurrency or defaults.CONCURRENCY)

    def open_source(self) -> tuple[TraceSource, bool]:
        """(the source, whether the caller must close it)."""
        if self.source is not None:
            return self.source, False
        if self.trace is not None:
            return file_source(self.trace), True
        return workload_source(self.workload, self.gen_config()), True

    def run(self, progress: ProgressFactory | None = None) -> dict:
        """Replay every policy; the `--json` document."""
        source, owned = self.open_source()
        try:
            if self.replicas > 1:
                from agentrt.bench.cluster import run_cluster_bench
                from agentrt.cluster.registry import DEFAULT_ROUTER
                doc = run_cluster_bench(source, self.policies, self.options, self.replicas,
                                        self.router or DEFAULT_ROUTER, progress=progress,
                                        transfer_gbps=self.transfer_gbps, router_options=self.router_options)
            else:
                doc = run_bench(source, self.policies, self.options, progress=progress)
        finally:
            if owned:
                source.close()
        doc["overload"] = overload_doc(check_overload(doc))
        return doc

    def write(self, doc: dict, say: Callable[[str], None] = lambda _: None) -> None:
        """Write the JSON, CSV and figure asked for, telling `say` where each went."""
        from agentrt.bench.output import write_csv, write_json
        if self.json_path is not None:
            say(f"results written to {write_json(doc, self.json_path)}")
        if self.csv_path is not None:
            say(f"table written to {write_csv(doc, self.csv_path)}")
        if self.plot_path is not None:
            from agentrt.bench.plot import plot_result
            plot_result(doc, self.plot_path)
            say(f"plot written to {self.plot_path}")

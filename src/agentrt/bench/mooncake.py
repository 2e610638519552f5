"""Export a trace as Mooncake lines for vLLM's benchmark client (`agentrt export mooncake`).

vLLM's `vllm bench serve --dataset-name timed_trace` (`TimedTrace` in vllm/benchmarks/datasets/
datasets.py) reads JSON Lines of `timestamp`, `input_length`, `output_length` and `hash_ids`, with
no header, and sends each request at its timestamp, open loop. A workflow trace cannot be read as
it is: its first line is a header, and a workflow's later calls carry no arrival time (they are
released when their predecessors finish, plus `think_ms`). So the trace is replayed once in the
simulator, as `agentrt bench` replays it (preset, GPU capacity, closed-loop concurrency, time
scale; LRU eviction, FCFS admission), and each call's issue time in that replay becomes its
absolute `timestamp` (integer ms from the replay's start). The client does not wait for a call's
predecessors: it replays the arrivals of one engine run, closed loop frozen into open loop.

Lines are sorted by timestamp (ties in issue order). Hash ids are renumbered densely from 0 over
(tenant, id), so they stay chained and tenants never share a block. `output_hash_ids` are dropped
(the client generates outputs; vLLM caches whatever it generates). The client turns each hash id
into `--timed-trace-chunk-hash-size` tokens, the same tokens for the same id and size, so that
flag must be the trace's block size for prompts of `input_length` tokens (a smaller value shrinks
every prompt, keeping which prompts share which prefix). `--timed-trace-sec-multiplier 0.001`
reads the timestamps as ms, and `--num-prompts` must be at least the line count (the client's
default is 1,000). These go to `OUT.meta.json` with the replay's settings.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from agentrt.bench.runner import (BenchOptions, engine_config, make_bench_scheduler,
                                  replay_concurrency, warn_time_scale)
from agentrt.bench.source import TraceSource
from agentrt.engine.replay import WorkflowReplay
from agentrt.engine.simulator import Simulator
from agentrt.policies.registry import make_policy
from agentrt.trace.schema import Call
from agentrt.trace.writer import replacing

REPLAY_POLICY = "lru"


class RecordingReplay(WorkflowReplay):
    """A `WorkflowReplay` that reports every call it issues, with its issue time (s)."""

    def __init__(self, calls: Iterator[Call], concurrency: int | None, time_scale: float,
                 record: Callable[[float, Call], None]) -> None:
        super().__init__(calls, concurrency, time_scale)
        self._record = record

    def pop_arrivals(self, now: float) -> list[tuple[float, Call]]:
        out = super().pop_arrivals(now)
        for t, c in out:
            self._record(t, c)
        return out


@dataclass(slots=True)
class MooncakeExport:
    path: str
    requests: int
    block_size: int
    duration_s: float               # the last request's timestamp
    source: str
    replay: dict = field(default_factory=dict)

    def client_flags(self) -> list[str]:
        """The `vllm bench serve` flags that read this file as it was written."""
        return ["--dataset-name", "timed_trace", "--dataset-path", self.path,
                "--timed-trace-chunk-hash-size", str(self.block_size),
                "--timed-trace-sec-multiplier", "0.001", "--num-prompts", str(self.requests)]

    def to_json(self) -> dict:
        return {"format": "mooncake", **asdict(self), "vllm_bench_serve_flags": self.client_flags(),
                "note": "timestamps are ms from the start of one simulated replay; lower "
                        "--timed-trace-chunk-hash-size to shrink prompts (shared prefixes are kept)"}


def meta_path(out: str | Path) -> Path:
    return Path(f"{out}.meta.json")


def replay_rows(source: TraceSource, opts: BenchOptions) -> tuple[list[tuple], dict]:
    """(rows (timestamp ms, order, input, output, hash ids) sorted by time, the replay's settings)."""
    rows: list[tuple] = []
    ids: dict[tuple[str, int], int] = {}

    def record(t: float, c: Call) -> None:
        hids = [ids.setdefault((c.tenant, h), len(ids)) for h in c.hash_ids]
        rows.append((round(t * 1000.0), len(rows), c.input_length, c.output_length, hids))

    warn_time_scale(source, opts)
    conc = replay_concurrency(opts.concurrency, source)
    cfg = engine_config(opts, source.header.block_size)
    replay = RecordingReplay(source.eval_calls(), conc, opts.time_scale, record)
    sim = Simulator(cfg, make_policy(REPLAY_POLICY, seed=opts.seed), iter(()), arrivals=replay,
                    scheduler=make_bench_scheduler(opts))
    m = sim.run()
    rows.sort(key=lambda r: (r[0], r[1]))
    settings = {"policy": REPLAY_POLICY, "scheduler": opts.scheduler, "preset": opts.preset,
                "gpu_blocks": cfg.gpu_blocks, "concurrency": conc, "time_scale": opts.time_scale,
                "workflows": m.workflows, "simulated_hit_rate": round(m.summary()["hit_rate"], 4)}
    return rows, settings


def export_mooncake(source: TraceSource, opts: BenchOptions, out: str | Path) -> MooncakeExport:
    """Replay `source` and write its calls to `out` as Mooncake lines, and `OUT.meta.json`; both
    are written under temporary names and renamed when complete."""
    rows, settings = replay_rows(source, opts)
    exp = MooncakeExport(str(out), len(rows), source.header.block_size,
                         rows[-1][0] / 1000.0 if rows else 0.0, source.label, settings)
    _write(Path(out), (json.dumps({"timestamp": t, "input_length": n_in, "output_length": n_out,
                             "hash_ids": hids}, separators=(",", ":")) + "\n"
                 for t, _, n_in, n_out, hids in rows))
    _write(meta_path(out), iter([json.dumps(exp.to_json(), indent=2) + "\n"]))
    return exp


def _write(path: Path, lines: Iterator[str]) -> None:
    with replacing(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.writelines(lines)

"""Where a live call's time to first token goes, per call: the client's records joined with the engine's.

Model. A live replay with `--log-dir` keeps, per policy, the client's calls (`calls-LABEL.jsonl`,
`client.write_calls`: each call's wall-clock send time, TTFT, latency) and the agentrt runtime's
event log in vLLM's engine core (`connector-LABEL.jsonl`: `arrival` when vLLM's scheduler takes
the request in, `lookup` each time it considers the request for a step). Both clocks are the
host's wall clock, so per call

    TTFT = to_engine + queued + to_first

- `to_engine`: send -> the scheduler takes it in: the client, HTTP, vLLM's API server, the
  hand-over to the engine core and its wait for the end of the step under way;
- `queued`: in the scheduler's waiting queue until the step that schedules it (its last lookup
  before the first token);
- `to_first`: that step (and any further prefill chunks) and the first token's way back to the
  client.
Assumptions: one host (one clock); the run had agentrt in the engine (the stock baseline has no
event log); calls are matched by (workflow, call), the identity the client sends.

`simulate` replays the calls the live run sent (its `replayed-engine.jsonl`) in the simulator on
a measured preset and keeps each call's times (`Simulator(record_calls=True)`); `side_by_side`
puts the same calls' parts next to each other, grouped by the live calls in flight at the send:
the simulator's `to_engine` is its request-path delay plus its wait for the step under way, its
`rest` is admission to first token (the live `queued` + `to_first`).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path

BUCKETS = ((0, 0), (1, 2), (3, 5), (6, 10), (11, 1 << 30))   # calls in flight at the send
BURST_S = 0.005     # a call sent this soon after another one is part of a burst (fan-out, start)


def _bucket_name(lo: int, hi: int) -> str:
    return f"{lo}" if lo == hi else f"{lo}+" if hi >= 1 << 30 else f"{lo}-{hi}"


@dataclass(slots=True)
class CallPath:
    workflow: str
    call: int
    in_flight: int        # other calls in flight when it was sent
    burst: bool           # sent within BURST_S after another call
    prompt_tokens: int
    cached_tokens: int
    ttft_s: float
    to_engine_s: float
    queued_s: float
    to_first_s: float


def _read_jsonl(path: Path, torn_tail: bool = False) -> list[dict]:
    """The file's records; `torn_tail`: a last line cut short (a server stopped mid-write, as
    the engine's event log may be) is left out, as `vllm.eventlog.read_events` does; anywhere
    else a line that is not a JSON object is an error naming it."""
    out = []
    with open(path) as f:
        lines = f.readlines()
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            if torn_tail and n == len(lines) and not line.endswith("\n"):
                continue
            raise ValueError(f"{path}:{n}: not JSON ({e.msg})") from None
        if not isinstance(rec, dict):
            raise ValueError(f"{path}:{n}: not a JSON object")
        out.append(rec)
    return out


def _time(rec: dict, path: Path) -> float:
    """An engine event's `t` (seconds, wall clock), or an error naming the event."""
    t = rec.get("t")
    if isinstance(t, bool) or not isinstance(t, (int, float)):
        raise ValueError(f"{path}: {rec.get('event')} event of request {rec.get('request')!r} "
                         f"has no numeric 't' (got {t!r})")
    return float(t)


def join(calls_path: str | Path, events_path: str | Path) -> list[CallPath]:
    """Each answered call of the client's log with its engine events (calls the engine log does
    not name are left out)."""
    calls = [c for c in _read_jsonl(Path(calls_path))
             if c.get("error") is None and c.get("ttft_s") is not None and c.get("sent_wall") is not None]
    arrivals: dict[tuple[str, int], tuple[str, float]] = {}   # (workflow, call) -> (request, its arrival time)
    lookups: dict[str, list[float]] = {}
    events_path = Path(events_path)
    for e in _read_jsonl(events_path, torn_tail=True):
        kind = e.get("event")
        if kind == "arrival" and isinstance(e.get("call"), int):
            t = _time(e, events_path)
            arrivals.setdefault((str(e.get("workflow")), e["call"]), (str(e.get("request")), t))
        elif kind == "lookup":
            lookups.setdefault(str(e.get("request")), []).append(_time(e, events_path))
    spans = sorted((c["sent_wall"], c["sent_wall"] + c["latency_s"]) for c in calls)
    out = []
    for c in calls:
        a = arrivals.get((str(c["workflow"]), int(c["call"])))
        if a is None:
            continue
        request, arrived = a
        sent, first = c["sent_wall"], c["sent_wall"] + c["ttft_s"]
        seen = [t for t in lookups.get(request, ()) if t <= first]
        scheduled = seen[-1] if seen else arrived
        in_flight = sum(1 for s, e in spans if s < sent < e)
        burst = any(0 < sent - s <= BURST_S for s, _ in spans)
        out.append(CallPath(str(c["workflow"]), int(c["call"]), in_flight, burst, int(c.get("prompt_tokens") or 0),
                            int(c.get("cached_tokens") or 0), c["ttft_s"], arrived - sent,
                            scheduled - arrived, first - scheduled))
    return out


def summary(paths: list[CallPath]) -> dict:
    """Mean of each part over all calls and by calls in flight at the send (`BUCKETS`)."""
    def means(ps: list[CallPath]) -> dict:
        return {"calls": len(ps), **{k: statistics.fmean(getattr(p, k) for p in ps)
                                     for k in ("ttft_s", "to_engine_s", "queued_s", "to_first_s", "in_flight")}}
    out = {"all": means(paths) if paths else {"calls": 0}, "by_in_flight": {}}
    for lo, hi in BUCKETS:
        ps = [p for p in paths if lo <= p.in_flight <= hi]
        if ps:
            out["by_in_flight"][_bucket_name(lo, hi)] = means(ps)
    return out


def markdown(label: str, s: dict) -> str:
    rows = [f"| {label} | {k} | {m['calls']} | {m['ttft_s'] * 1e3:.1f} | {m['to_engine_s'] * 1e3:.1f} | "
            f"{m['queued_s'] * 1e3:.1f} | {m['to_first_s'] * 1e3:.1f} |"
            for k, m in [("all", s["all"]), *s["by_in_flight"].items()] if m.get("calls")]
    return "\n".join(["| run | calls in flight at the send | calls | TTFT ms | to the engine ms | queued ms "
                      "| scheduled to first token ms |", "| --- | --- | ---: | ---: | ---: | ---: | ---: |", *rows])


def simulate(engine_trace: str | Path, preset_file: str | Path, policy: str, gpu_blocks: int) -> list[dict]:
    """The simulator's call log (`Metrics.call_log`) for `policy` on the live run's calls, with the
    live run's pool (`gpu_blocks`: vLLM's blocks less its null block), concurrency (the trace
    header's) and the preset's caching point, no training split (as `benchmarks.fidelity`)."""
    from agentrt.bench.runner import BenchOptions, run_policy
    from agentrt.bench.source import file_source
    from agentrt.engine.preset_file import load_preset_file
    pf = load_preset_file(preset_file)
    opts = BenchOptions(preset_file=str(preset_file), gpu_blocks=gpu_blocks, train_fraction=0.0,
                        cache_at=pf.cache_at)
    opts.validate([policy])
    source = file_source(engine_trace)
    try:
        return run_policy(source, policy, opts, record_calls=True).metrics.call_log
    finally:
        source.close()


def side_by_side(live: list[CallPath], sim: list[dict]) -> list[dict]:
    """Over the calls both ran, all of them, those sent alone and in a burst (`BURST_S`), and
    per bucket of live calls in flight at the send (`BUCKETS`): the mean live and simulated
    TTFT, time to the engine and rest (ms)."""
    by_key = {(str(c["workflow"]), int(c["call"])): c for c in sim}
    pairs = [(p, by_key[(p.workflow, p.call)]) for p in live if (p.workflow, p.call) in by_key]
    groups = [("all", pairs), ("sent alone", [(p, c) for p, c in pairs if not p.burst]),
              ("in a burst", [(p, c) for p, c in pairs if p.burst])]
    groups += [(_bucket_name(lo, hi), [(p, c) for p, c in pairs if lo <= p.in_flight <= hi]) for lo, hi in BUCKETS]
    rows = []
    for name, ps in groups:
        if not ps:
            continue
        f = statistics.fmean
        rows.append({"in_flight": name, "calls": len(ps),
                     "live_ttft_ms": 1e3 * f(p.ttft_s for p, _ in ps), "sim_ttft_ms": 1e3 * f(c["ttft_s"] for _, c in ps),
                     "live_to_engine_ms": 1e3 * f(p.to_engine_s for p, _ in ps),
                     "sim_to_engine_ms": 1e3 * f(c["to_engine_s"] for _, c in ps),
                     "live_rest_ms": 1e3 * f(p.queued_s + p.to_first_s for p, _ in ps),
                     "sim_rest_ms": 1e3 * f(c["ttft_s"] - c["to_engine_s"] for _, c in ps)})
    return rows


def side_by_side_markdown(label: str, rows: list[dict]) -> str:
    lines = ["| run | calls (live calls in flight at the send) | calls | TTFT ms live / sim | to the engine ms live / sim "
             "| then to the first token ms live / sim |", "| --- | --- | ---: | ---: | ---: | ---: |"]
    lines += [f"| {label} | {r['in_flight']} | {r['calls']} | {r['live_ttft_ms']:.1f} / {r['sim_ttft_ms']:.1f} | "
              f"{r['live_to_engine_ms']:.1f} / {r['sim_to_engine_ms']:.1f} | {r['live_rest_ms']:.1f} / {r['sim_rest_ms']:.1f} |"
              for r in rows]
    return "\n".join(lines)

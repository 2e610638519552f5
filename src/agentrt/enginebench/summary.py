"""One engine run's figures, in the simulator's JSON schema: the engine's own prefix-cache counters
(deltas of its Prometheus metrics over the replay), latencies measured at the client, and the
connector's last `stats` event and errors from its event log.

- hit_rate: hits / queries of the engine's counters; host_hit_rate: external (connector) hits /
  queries; prefill_tokens: prompt tokens minus the cached tokens each response reports;
- ttft, e2e, tpot (mean, p50, p90, p99): tpot per call of more than one output token, as
  (latency - ttft) / (output tokens - 1), as the simulator records it (engine/metrics.py);
- throughput: prompt plus generated tokens per second from the first issue to the last finish;
- engine_phases: vLLM's own per-request means over the run (its latency histograms): TTFT and
  inter-token latency at its API server, queue, prefill and decode time in its engine core; the
  client's TTFT less vLLM's is the HTTP path and the client;
- token_stalls: tokens that reached the client more than `SLOW_GAP_S` after the previous one
  (`client_stalls`, `client_stalled_s` in all, over `client_gaps` gaps between streamed chunks)
  against those vLLM's own inter-token histogram records as that slow (`engine_stalls` of
  `engine_gaps`; its engine core stamps each token as it is made): stalls the client sees and
  vLLM does not are in the serving path between them (the API server's output path, HTTP, the
  client);
- workflows_in_flight_max: the most workflows with a call in flight at once (a closed loop's
  concurrency bounds it);
- inflight_s: how long at least one call was in flight (the union of the calls' send-to-finish
  spans): the time the engine had work, to set against its compute (`engine_iterations`);
- tenants (when the calls name more than one): per tenant, its calls, its hit rate from the
  cached tokens its responses report, and its TTFT, as the simulator reports them.
Failed calls (an error recorded by the client) count in `calls` and `errors`, not in the figures.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from agentrt.engine.metrics import latency_stats
from agentrt.enginebench import prom
from agentrt.enginebench.client import ReplayResult
from agentrt.enginebench.prom import SLOW_GAP_S


def _mean(xs: list[float]) -> float | None:
    return float(np.mean(xs)) if xs else None


def summarize(res: ReplayResult, before: dict, after: dict, conn: dict | None) -> dict:
    d = prom.delta(after, before)
    q = d[prom.QUERIES] or 1.0
    ok = [c for c in res.calls if c.error is None]
    prompt = sum(c.prompt_tokens for c in ok)
    cached = sum(c.cached_tokens for c in ok)
    out_tok = sum(c.output_tokens for c in ok)
    span = res.last_finish - (res.first_issue or 0.0)
    ttft = [c.ttft_s for c in ok if c.ttft_s is not None]
    # per call of more than one output token, as the simulator records it (engine/metrics.py)
    tpot = [(c.latency_s - c.ttft_s) / (c.output_tokens - 1) for c in ok
            if c.ttft_s is not None and c.output_tokens > 1]
    return {
        "hit_rate": d[prom.HITS] / q,
        "host_hit_rate": d[prom.EXT_HITS] / q,
        "prefill_tokens": prompt - cached,
        **latency_stats(ttft, "ttft"), **latency_stats(res.e2e, "e2e"), **latency_stats(tpot, "tpot"),
        "throughput_tok_s": (prompt + out_tok) / span if span > 0 else 0.0,
        "calls": len(res.calls), "workflows": res.workflows, "errors": res.errors,
        "prompt_tokens": prompt, "cached_tokens": cached, "output_tokens": out_tok,
        "client_hit_rate": cached / prompt if prompt else 0.0,
        "latency_mean_s": _mean([c.latency_s for c in ok]),
        "makespan_s": span,
        "inflight_s": inflight(res.calls),
        "workflows_in_flight_max": workflows_in_flight_max(res.calls),
        "preemptions": int(d.get(prom.PREEMPTIONS, 0)),   # as the simulator's summary names it
        "engine_counters": d,
        "engine_phases": prom.phases(d),
        "token_stalls": token_stalls(ok, d),
        "connector": conn,
        **_tenants(ok),
    }


def token_stalls(ok: list, d: dict[str, float]) -> dict:
    gaps = sum(max(0, c.output_tokens - 1) for c in ok if c.ttft_s is not None)
    itl = d.get(f"{prom.PHASES['inter_token']}_count", 0.0)
    return {"threshold_s": SLOW_GAP_S, "client_stalls": sum(c.stalls for c in ok),
            "client_stalled_s": float(sum(c.stalled_s for c in ok)), "client_gaps": gaps,
            "engine_stalls": int(itl - d.get(prom.ITL_FAST, 0.0)), "engine_gaps": int(itl)}


def workflows_in_flight_max(calls: list) -> int:
    """The most workflows with a call in flight at once: at most the replay's concurrency in a
    closed loop (the check that the live client runs the loop the simulator runs)."""
    ev = sorted(e for c in calls if c.sent_at is not None
                for e in ((c.sent_at, 1, c.workflow), (c.sent_at + c.latency_s, -1, c.workflow)))
    live: dict[str, int] = {}
    best = 0
    for _, d, wf in ev:          # at equal times an end (-1) sorts before a start
        n = live.get(wf, 0) + d
        if n:
            live[wf] = n
        else:
            live.pop(wf, None)
        best = max(best, len(live))
    return best


def inflight(calls: list) -> float:
    """Seconds covered by at least one call's send-to-finish span."""
    spans = sorted((c.sent_at, c.sent_at + c.latency_s) for c in calls if c.sent_at is not None)
    total, end = 0.0, None
    for a, b in spans:
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def _tenants(ok: list) -> dict:
    by: dict[str, list] = {}
    for c in ok:
        by.setdefault(c.tenant, []).append(c)
    if len(by) < 2:
        return {}
    out = {}
    for t, cs in sorted(by.items()):
        prompt = sum(c.prompt_tokens for c in cs)
        ttft = [c.ttft_s for c in cs if c.ttft_s is not None]
        out[t] = {"calls": len(cs), "hit_rate": sum(c.cached_tokens for c in cs) / prompt if prompt else 0.0,
                  **latency_stats(ttft, "ttft")}
    return {"tenants": out}


def connector_stats(path: Path) -> dict | None:
    from agentrt.vllm.eventlog import read_events
    stats = read_events(str(path), "stats")
    errors = read_events(str(path), "error")
    if not stats and not errors:
        return None
    out = dict(stats[-1]) if stats else {}
    for k in ("t", "pid", "role", "event"):
        out.pop(k, None)
    out["errors"] = [e.get("error") or e.get("unknown_keys") for e in errors]
    return out

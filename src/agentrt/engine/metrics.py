"""What a replay measures, and its summary in the `agentrt bench --json` schema.

Hit rates are token hit rates over user calls only (runtime warm-ups are excluded): prompt tokens
served from the GPU tier (or loaded from the host tier) / prompt tokens. Like vLLM, a fully cached
prompt still computes its last token, so a call's hit is capped at input_length - 1.
Throughput is prompt plus generated tokens of user calls per simulated second, from the first
arrival to the last finish.
Prompt tokens, hits and prefill tokens are counted at a user call's first admission only; a
call preempted and admitted again adds to `preemptions` and to `recompute_tokens` (tokens it had
in its KV that its new prefill computes again), never to the hit rate or a second TTFT.
Arrival span: first to last user-call arrival; drain: last arrival to last finish (how long the
backlog took to clear once arrivals stopped, `bench/overload.py`).
Latencies are in seconds: TTFT per user call (arrival to first token), E2E per workflow (first
arrival to last finish), TPOT per user call of more than one output token ((finish - first
token) / (output tokens - 1)), where the engine records it (`record_tpot`); the TPOT fields are
None when it recorded none; wait per user call from arrival to its first admission (the start of
the iteration that first schedules it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


def _mean(xs: list[float]) -> float:
    return float(np.mean(xs)) if xs else 0.0


def _p50(xs: list[float]) -> float:
    return float(np.percentile(xs, 50)) if xs else 0.0


def _p90(xs: list[float]) -> float:
    return float(np.percentile(xs, 90)) if xs else 0.0


def _p99(xs: list[float]) -> float:
    return float(np.percentile(xs, 99)) if xs else 0.0


def latency_stats(xs: list[float], prefix: str, empty: float | None = None) -> dict:
    """{prefix_mean_s, _p50_s, _p90_s, _p99_s}: `empty` each when there is no sample."""
    if not xs:
        return dict.fromkeys((f"{prefix}_{k}_s" for k in ("mean", "p50", "p90", "p99")), empty)
    return {f"{prefix}_mean_s": _mean(xs), f"{prefix}_p50_s": _p50(xs),
            f"{prefix}_p90_s": _p90(xs), f"{prefix}_p99_s": _p99(xs)}


@dataclass(slots=True)
class TenantStats:
    """One tenant's share of a replay (reported when a trace has more than one tenant)."""
    calls: int = 0
    prompt_tokens: int = 0
    gpu_hit_tokens: int = 0
    ttft: list[float] = field(default_factory=list)
    queue_wait: list[float] = field(default_factory=list)

    def summary(self) -> dict:
        return {"calls": self.calls, "wait_p90_s": _p90(self.queue_wait),
                "wait_max_s": max(self.queue_wait, default=0.0), "hit_rate": self.gpu_hit_tokens / (self.prompt_tokens or 1),
                **latency_stats(self.ttft, "ttft", 0.0)}


@dataclass(slots=True)
class Metrics:
    calls: int = 0
    workflows: int = 0
    prompt_tokens: int = 0
    gpu_hit_tokens: int = 0
    host_hit_tokens: int = 0
    remote_hit_tokens: int = 0      # fetched from a peer replica's GPU (cluster with peer transfer)
    prefill_tokens: int = 0
    output_tokens: int = 0
    warmup_calls: int = 0
    warmup_prefill_tokens: int = 0
    oversize_calls: int = 0
    late_arrivals: int = 0
    block_touches: int = 0
    evictions: int = 0
    h2d_bytes: int = 0
    d2h_bytes: int = 0
    net_bytes: int = 0              # KV bytes received from peer replicas
    prefetch_blocks: int = 0
    preemptions: int = 0
    recompute_tokens: int = 0
    first_arrival: float | None = None
    last_arrival: float | None = None
    last_finish: float = 0.0
    wall_seconds: float = 0.0
    ttft: list[float] = field(default_factory=list)
    e2e: list[float] = field(default_factory=list)
    tpot: list[float] = field(default_factory=list)   # per user call of > 1 output token
    queue_wait: list[float] = field(default_factory=list)   # arrival to first admission, per user call
    tenants: dict = field(default_factory=dict)   # tenant -> TenantStats
    call_log: list | None = None    # one dict per finished user call, when asked for (Simulator(record_calls))

    def tenant(self, name: str) -> "TenantStats":
        t = self.tenants.get(name)
        if t is None:
            t = self.tenants[name] = TenantStats()
        return t

    def record_tpot(self, first_token: float, finish: float, output_tokens: int) -> None:
        """A user call's time per output token after the first (none for a one-token call)."""
        if output_tokens > 1:
            self.tpot.append((finish - first_token) / (output_tokens - 1))

    def summary(self) -> dict:
        pt = self.prompt_tokens or 1
        span = self.last_finish - (self.first_arrival or 0.0)
        tokens = self.prompt_tokens + self.output_tokens
        return {
            "hit_rate": self.gpu_hit_tokens / pt,
            "host_hit_rate": self.host_hit_tokens / pt,
            "remote_hit_rate": self.remote_hit_tokens / pt,
            "prefill_tokens": self.prefill_tokens,
            **latency_stats(self.ttft, "ttft", 0.0),
            **latency_stats(self.tpot, "tpot"),
            **latency_stats(self.e2e, "e2e", 0.0),
            **latency_stats(self.queue_wait, "wait", 0.0),
            "wait_max_s": max(self.queue_wait, default=0.0),
            "throughput_tok_s": tokens / span if span > 0 else 0.0,
            "calls": self.calls,
            "workflows": self.workflows,
            "prompt_tokens": self.prompt_tokens,
            "output_tokens": self.output_tokens,
            "pcie_bytes": self.h2d_bytes + self.d2h_bytes,
            "pcie_h2d_bytes": self.h2d_bytes,
            "pcie_d2h_bytes": self.d2h_bytes,
            "net_bytes": self.net_bytes,
            "evictions": self.evictions,
            "prefetch_blocks": self.prefetch_blocks,
            "preemptions": self.preemptions,
            "recompute_tokens": self.recompute_tokens,
            "warmup_calls": self.warmup_calls,
            "warmup_prefill_tokens": self.warmup_prefill_tokens,
            "oversize_calls": self.oversize_calls,
            "late_arrivals": self.late_arrivals,
            "makespan_s": span,
            "arrival_span_s": ((self.last_arrival - self.first_arrival)
                               if self.last_arrival is not None and self.first_arrival is not None else 0.0),
            "drain_s": (self.last_finish - self.last_arrival) if self.last_arrival is not None else 0.0,
            "block_touches": self.block_touches,
            "wall_s": self.wall_seconds,
            "touches_per_s": self.block_touches / self.wall_seconds if self.wall_seconds > 0 else 0.0,
            **({"tenants": {t: v.summary() for t, v in sorted(self.tenants.items())}}
               if len(self.tenants) > 1 else {}),
        }

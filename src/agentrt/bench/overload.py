"""Is an open-loop replay overloaded? When arrivals outpace the replica, every latency measures
the backlog, not the policy, and eviction order hardly matters (running requests hold the pool,
or the prefill queue decides the TTFT).

Model
- Only open-loop replays are checked (the trace's own arrival times). A closed loop releases a
  workflow only when another finishes, so its queue is bounded by the concurrency chosen.
- Read on the reference run: LRU (the run every table compares against, shown or not), else the
  first policy that is not a bound.
- Overloaded when both hold (and the run has at least 20 calls: a handful of calls arriving
  together is a burst, not a queue to warn about):
  - the backlog left at the last arrival took more than a quarter of the arrival span to clear
    (`drain_s > arrival_span_s / 4`). A stable queue clears within a few calls' latency; an
    unstable one grows through the run, by about (offered load - 1) x span;
  - the median call's time to first token is a real share of that backlog (`ttft_p50_s >
    drain_s / 4`; in a queue that grows at a steady rate it is about half of it). This leaves
    out a short trace whose last call merely decodes for long: its calls got their first token
    at once. The queueing shows in the TTFT whether calls wait for admission (memory full: running
    requests hold the pool) or share the prefill of many admitted calls (compute full).
- Saturated in bursts (`kind` "bursts"), when the arrivals do not outpace the replica on the
  whole run but its bursts do: the slowest tenth of the calls waited for admission more than
  twice as long as the median call took to its first token (`wait_p90_s > 2 x ttft_p50_s`). A
  call waits for admission only while the pool (or the running-request limit) is full, so a
  tenth of the calls queueing longer than a typical call is served says the tail latencies
  (TTFT p90, p99) measure the queue of the bursts; the hit rates still compare the policies,
  though running requests held much of the pool then. The factor 2 keeps out a call that waits
  one engine iteration where the median call is served in about one (figures: docs/output.md).
  No stretch is suggested: how far to stretch a burst depends on its shape, not on the run's
  totals.
- The suggested stretch (`--time-scale`) brings the offered work to about 80% of what the
  replica served. Overloaded, the replica is busy from the first arrival to the last finish:
  span + drain seconds of service for span seconds of arrivals, so stretching the arrivals by
  (span + drain) / (0.8 x span) offers 80% of it. Hit rates move with the load, so it is a
  starting point, not a promise; for the same rate, as many times the replicas.
Nothing here runs a replay; it reads the summary of one (`engine/metrics.py`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

DRAIN_SHARE = 0.25     # backlog clearing longer than this share of the arrival span
TTFT_SHARE = 0.25      # the median call's TTFT above this share of the backlog's clearing time
TARGET_LOAD = 0.8      # what the suggestion aims at: 80% of the work the replica served
BURST_WAIT_RATIO = 2.0  # p90 admission wait over the median TTFT that says bursts saturate
MIN_CALLS = 20         # fewer calls make no queue worth the name (two calls 1 ms apart are a burst)


@dataclass(slots=True)
class Overload:
    reference: str                  # the result read (lru, else the first policy)
    arrival_span_s: float
    drain_s: float
    wait_p50_s: float
    ttft_p50_s: float
    suggested_time_scale: float | None   # None when every call arrives at one instant
    suggested_replicas: int | None
    replicas: int = 1
    kind: str = "sustained"         # or "bursts": saturated in bursts only (no suggestion)
    wait_p90_s: float | None = None


def _round_up(x: float) -> float:
    """Up to two significant digits: 2.63 -> 2.7, 14.2 -> 15."""
    if x <= 0:
        return x
    step = 10.0 ** (math.floor(math.log10(x)) - 1)
    return round(math.ceil(x / step - 1e-9) * step, 6)


def reference_result(doc: dict) -> tuple[str, dict] | None:
    """(name, result) of the run a document's notes read: LRU, shown or not, else the first
    policy that is not a bound."""
    res = doc.get("results") or {}
    if "lru" in res:
        return "lru", res["lru"]
    if doc.get("lru_reference"):
        return "lru", doc["lru_reference"]
    for name, r in res.items():
        if not r.get("bound"):
            return name, r
    return None


def check_overload(doc: dict) -> Overload | None:
    """The overload of a bench document's replay, or None (closed loop, or not overloaded)."""
    cfg = doc.get("config") or {}
    if cfg.get("concurrency"):
        return None
    ref = reference_result(doc)
    if ref is None:
        return None
    name, r = ref
    span, drain = r.get("arrival_span_s"), r.get("drain_s")
    wait, ttft = r.get("wait_p50_s"), r.get("ttft_p50_s")
    if None in (span, drain, wait, ttft) or (r.get("calls") or 0) < MIN_CALLS:
        return None
    n = cfg.get("replicas") or 1
    wait90 = r.get("wait_p90_s")
    if not (drain > 0 and drain > DRAIN_SHARE * span and ttft > TTFT_SHARE * drain):
        if wait90 is not None and wait90 > BURST_WAIT_RATIO * ttft and wait90 > 0:
            return Overload(name, span, drain, wait, ttft, None, None, n, "bursts", wait90)
        return None
    stretch = more = None
    if span > 0:
        factor = (span + drain) / (TARGET_LOAD * span)
        stretch = _round_up(factor * (cfg.get("time_scale") or 1.0))
        more = math.ceil(factor * n)
    return Overload(name, span, drain, wait, ttft, stretch, more, n, "sustained", wait90)


def overload_doc(o: Overload | None) -> dict | None:
    """The `overload` field of the JSON document."""
    return None if o is None else asdict(o)


def overload_text(o: dict) -> str:
    """One paragraph for the table's reader."""
    n = o.get("replicas") or 1
    who = "the replica" if n == 1 else f"the {n} replicas"
    if o.get("kind") == "bursts":
        return (f"saturated in bursts: the arrivals do not outpace {who} over the run, but its bursts "
                f"do. In the {o['reference']} run a tenth of the calls waited more than "
                f"{o['wait_p90_s']:,.1f} s for admission, while the median call had its first token "
                f"after {o['ttft_p50_s']:,.1f} s: the tail latencies (TTFT p90, p99) measure the queue "
                f"of the bursts, and running requests held the pool then. To compare policies' tail "
                f"latencies, stretch the arrivals further (--time-scale) or add replicas.")
    head = (f"overloaded: the arrivals outpace {who}. In the {o['reference']} run the backlog took "
            f"{o['drain_s']:,.0f} s to clear after the last arrival (the arrivals span "
            f"{o['arrival_span_s']:,.0f} s) and the median call waited {o['ttft_p50_s']:,.1f} s for its "
            f"first token ({o['wait_p50_s']:,.1f} s of it for admission), so latencies measure the "
            f"queue and eviction order matters little.")
    if o.get("suggested_time_scale") is None:
        return head + " Every call arrives at one instant: spread them out to measure a policy."
    return (head + f" For about 80% load try --time-scale {o['suggested_time_scale']:g} "
            f"(or --replicas {o['suggested_replicas']} at this rate).")

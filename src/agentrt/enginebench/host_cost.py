"""What handling a call on the host costs the engine's progress: `agentrt calibrate`'s host points.

Model. Where vLLM's processes share cores (this 2-core machine: the worker holds one in vLLM's
busy loop; the engine core, the API server and the client share the other), the CPU that a
call's handling takes outside the engine's iterations (the client, HTTP, the API server's work
on its request and its stream, the engine core's bookkeeping for it) is time in which the engine
does not step. Measured per batch size b: b calls decode long answers; over window A nothing else
runs and the step time is window / tokens each call received (`step_a`); over window B short
calls (`PROBE_TOKENS` fresh tokens, one output token) go one after another, n of them. The time
the batch lost is window_b - tokens_b x step_a; per short call, less what the cost model charges
for its own prefill beside the batch (one iteration with its tokens added), what is left is the
call's host cost. `host_per_call_s` is the median over the batch sizes, never below 0; the
simulator charges half of it to the engine's timeline when a call finishes and, when the call
reaches the engine, the call's request path (`request_overhead_s`) instead of the other half
(`engine/simulator.py`). On a host with cores to spare for the API server and the client it
measures about 0 and the simulator charges nothing.
Assumptions: the short calls' own iterations cost what the fitted model says (the cost model's
prefill-beside-decodes terms, checked by the stream probes); tokens reach the client in the
step that made them (chunks may bunch them, so counts over a window are used, not gaps).
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable

BATCHES = (2, 4, 8)
CONTEXT = 128            # prompt tokens of each decoding call
WINDOW_A_S = 0.8         # the batch alone
WINDOW_B_S = 1.5         # the batch beside short calls
MAX_DECODE = 1500        # output tokens of each decoding call (fewer where the pool is small)
SETTLE_S = 0.3           # after every call has its first token, before window A


def lost_per_call(times: list[list[float]], a: tuple[float, float], b: tuple[float, float],
                  calls: int) -> float | None:
    """Seconds of the batch's progress lost per short call: `times` holds each decoding call's
    token arrival times, `a` and `b` the windows (start, end) on that clock, `calls` the short
    calls answered within `b`. None when a window saw too few tokens to time it."""
    per_a = [sum(1 for t in ts if a[0] < t <= a[1]) for ts in times]
    per_b = [sum(1 for t in ts if b[0] < t <= b[1]) for ts in times]
    if min(per_a) < 4 or min(per_b) < 4 or calls <= 0:
        return None
    step_a = (a[1] - a[0]) / statistics.median(per_a)
    return ((b[1] - b[0]) - statistics.median(per_b) * step_a) / calls


def host_points(probe, say: Callable[[str], None], pool_tokens: int) -> list[list[float]]:
    """[batch, total context, seconds lost per short call] per batch size that fits the KV pool
    (`Probe` from `calibrate.py`: streamed token-id requests to a running server)."""
    from agentrt.enginebench.calibrate import PROBE_TOKENS
    out = []
    for batch in BATCHES:
        decode_tokens = min(MAX_DECODE, int(0.9 * pool_tokens / batch) - CONTEXT - PROBE_TOKENS)
        if decode_tokens < 200:
            continue
        results: list = [None] * batch
        firsts = [threading.Event() for _ in range(batch)]
        origin = time.perf_counter()

        def run(i: int) -> None:
            results[i] = probe.request(probe.tokens(CONTEXT), decode_tokens, origin, firsts[i])
        threads = [threading.Thread(target=run, args=(i,)) for i in range(batch)]
        for t in threads:
            t.start()
        calls, a, b = 0, (0.0, 0.0), (0.0, 0.0)
        if all(e.wait(120) for e in firsts):
            time.sleep(SETTLE_S)
            now = time.perf_counter() - origin
            a = (now, now + WINDOW_A_S)
            time.sleep(WINDOW_A_S)
            start = time.perf_counter() - origin
            while time.perf_counter() - origin < start + WINDOW_B_S:
                probe.request(probe.tokens(PROBE_TOKENS), 1)
                calls += 1
            b = (start, time.perf_counter() - origin)
        for t in threads:
            t.join()
        if any(r is None for r in results) or max(r[0][-1] for r in results) < b[1]:
            say(f"host cost, batch {batch}: the batch ended before the windows did; skipped")
            continue
        lost = lost_per_call([r[0] for r in results], a, b, calls)
        if lost is None:
            continue
        out.append([batch, batch * (CONTEXT + decode_tokens / 2), lost])
        say(f"host cost, batch {batch:2d}: {calls} short calls beside it, {lost * 1e3:.2f} ms of its progress lost per call")
    return out


def host_per_call(points: list[list[float]], extra_step: Callable[[float, float], float]) -> tuple[float, list]:
    """The median over `points` of the time lost per short call less `extra_step(batch, ctx)`,
    what the cost model charges for its prefill beside the batch; never below 0. Also the
    points with that charge and the host cost each gives."""
    rows = [[b, ctx, lost, extra_step(b, ctx), lost - extra_step(b, ctx)] for b, ctx, lost in points]
    if not rows:
        return 0.0, []
    return max(0.0, statistics.median(r[4] for r in rows)), rows

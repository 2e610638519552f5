"""Where a live run's time went inside vLLM: its per-iteration log, summarised.

With `--enable-logging-iteration-details` vLLM's API server logs one line per engine iteration:
how many prompt (context) and decode (generation) requests and tokens it ran, and its elapsed
time, which vLLM measures around the wait for the model's output only (`EngineCore.step`:
scheduling, the KV connector's scheduler hooks and output processing are outside it). The sum
of those times is the engine's compute; the rest of the replay's makespan is time no iteration
was running: the engine idle (nothing to run, or requests not yet through the API server) or
its loop between iterations (scheduling, output handling, and on a small CPU box, processes
sharing cores). The simulator's counterpart is its `busy_s`: the time its cost model spent in
iterations. Comparing the two splits a latency gap between the cost model (compute) and what
the simulator does not model (everything between iterations).
Assumption: the line format of vLLM 0.32's `loggers.py` (checked by a test against a line
copied from a live server's log); lines that do not match are skipped, and no line at all gives
None (an engine that was not asked to log them).
"""

from __future__ import annotations

import re
import statistics
from pathlib import Path

LINE = re.compile(r"Iteration\(\d+\): (\d+) context requests, (\d+) context tokens, (\d+) generation "
                  r"requests, (\d+) generation tokens, iteration elapsed time: ([\d.]+) ms")
FLAG = "--enable-logging-iteration-details"
# decode-only iterations by how many requests they decoded
BUCKETS = ((1, 1), (2, 3), (4, 7), (8, 15), (16, 31), (32, 1 << 30))


def parse(text: str) -> list[tuple[int, int, int, int, float]]:
    """(prompt requests, prompt tokens, decode requests, decode tokens, elapsed s) per iteration."""
    out = []
    for m in LINE.finditer(text):
        cr, ct, gr, gt, ms = m.groups()
        out.append((int(cr), int(ct), int(gr), int(gt), float(ms) / 1000.0))
    return out


def summarize(rows: list[tuple[int, int, int, int, float]], makespan_s: float | None = None) -> dict | None:
    """Iterations, their summed time (`busy_s`), its share of the makespan, the iterations that
    ran prompt tokens, and the median decode-only step by batch size (ms)."""
    if not rows:
        return None
    busy = sum(r[4] for r in rows)
    prefill = [r for r in rows if r[0]]
    steps = {}
    for lo, hi in BUCKETS:
        xs = [r[4] for r in rows if not r[0] and lo <= r[2] <= hi]
        if xs:
            name = str(lo) if lo == hi else (f"{lo}+" if hi >= 1 << 30 else f"{lo}-{hi}")
            steps[name] = {"iterations": len(xs), "median_ms": 1000.0 * statistics.median(xs)}
    return {"iterations": len(rows), "busy_s": busy,
            "busy_share": busy / makespan_s if makespan_s else None,
            "prefill_iterations": len(prefill), "prefill_busy_s": sum(r[4] for r in prefill),
            "decode_step_ms": steps}


def from_log(path: str | Path, makespan_s: float | None = None) -> dict | None:
    p = Path(path)
    if not p.exists():
        return None
    return summarize(parse(p.read_text(errors="replace")), makespan_s)

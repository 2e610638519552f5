"""Fuzz the trace reader through the `agentrt` command line: N malformed traces, zero tracebacks.

Each case is a valid seed trace mutated by benchmarks/trace_mutations.py (byte flips, truncation,
gzip corruption, deep nesting, huge numbers, surrogates, wrong types, missing fields, unchained
hash ids, id collisions, unsorted starts). Every case runs `agentrt stats FILE` and
`agentrt bench --trace FILE --policies lru` in-process (typer's CliRunner, the same app the
`agentrt` entry point runs), each under a time limit, and is counted as:

- traceback: an exception other than the project's own `AgentrtError`;
- hang: a command past the time limit;
- clean error: an `AgentrtError` (a bad trace: `TraceError`, whose message starts `FILE:LINE: `);
- accepted: both commands exit 0 (warnings such as unsorted starts are counted apart).

    python -m benchmarks.fuzz_traces [-n 1000] [--seed 0] [--timeout 20] [--no-bench]

Exits non-zero when any traceback or hang is found, printing each one's seed and mutations.
"""

from __future__ import annotations

import argparse
import random
import signal
import sys
import tempfile
import time
import warnings
from collections import Counter
from pathlib import Path

from agentrt.errors import AgentrtError, TraceError, TraceWarning
from benchmarks.trace_mutations import make_case


class Hang(Exception):
    pass


def _alarm(*_):
    raise Hang()


def run_cli(runner, app, args: list[str], limit_s: float):
    """(outcome, detail) of one command: ok, clean, traceback or hang."""
    signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, limit_s)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            res = runner.invoke(app, args, catch_exceptions=True)
    except Hang:
        return "hang", "past the time limit"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    exc = res.exception
    if isinstance(exc, Hang):
        return "hang", "past the time limit"
    warned = any(issubclass(w.category, TraceWarning) for w in caught)
    if exc is None or (isinstance(exc, SystemExit) and exc.code in (0, None)):
        return ("warned" if warned else "ok"), ""
    if isinstance(exc, TraceError):
        where = f"{exc.path}:{exc.line}: "
        if not str(exc).startswith(where) or (exc.field and f"field '{exc.field}'" not in str(exc)):
            return "traceback", f"TraceError without file/line/field: {exc}"
        return "clean", str(exc)
    if isinstance(exc, AgentrtError):
        return "clean", str(exc)
    return "traceback", f"{type(exc).__name__}: {str(exc)[:300]}"


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.fuzz_traces", description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=1000, help="fuzzed traces")
    ap.add_argument("--seed", type=int, default=0, help="first case's seed (case i uses seed + i)")
    ap.add_argument("--timeout", type=float, default=20.0, help="seconds per command before it counts as a hang")
    ap.add_argument("--no-bench", action="store_true", help="run `stats` only")
    args = ap.parse_args()

    from typer.testing import CliRunner

    from agentrt.cli import app
    runner = CliRunner()
    counts: Counter[str] = Counter()
    mutations: Counter[str] = Counter()
    problems = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="agentrt-fuzz-") as tmp:
        for i in range(args.n):
            seed = args.seed + i
            path, applied = make_case(random.Random(seed), Path(tmp), f"case{i}")
            mutations.update(applied)
            commands = [["stats", str(path)]]
            if not args.no_bench:
                commands.append(["bench", "--trace", str(path), "--policies", "lru", "--quiet",
                                 "--gpu-blocks", "256"])
            results = [run_cli(runner, app, c, args.timeout) for c in commands]
            kinds = {k for k, _ in results}
            for bad in ("traceback", "hang"):
                if bad in kinds:
                    detail = next(d for k, d in results if k == bad)
                    problems.append(f"{bad}: seed {seed}, mutations {applied}: {detail}")
            if "traceback" in kinds:
                counts["traceback"] += 1
            elif "hang" in kinds:
                counts["hang"] += 1
            elif "clean" in kinds:
                counts["clean error"] += 1
            elif "warned" in kinds:
                counts["accepted with a warning"] += 1
            else:
                counts["accepted"] += 1
            path.unlink(missing_ok=True)
    dt = time.perf_counter() - t0
    cmds = "stats" if args.no_bench else "stats + bench"
    print(f"{args.n} fuzzed traces ({cmds}, seeds {args.seed}..{args.seed + args.n - 1}) in {dt:.1f} s")
    for k in ("traceback", "hang", "clean error", "accepted with a warning", "accepted"):
        print(f"  {k:24s} {counts[k]:6d}")
    print("mutations applied: " + ", ".join(f"{k} {v}" for k, v in sorted(mutations.items())))
    for p in problems[:50]:
        print(p)
    return 1 if counts["traceback"] or counts["hang"] else 0


if __name__ == "__main__":
    sys.exit(main())

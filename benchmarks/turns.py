"""How often each inferred conversation turn is followed up, on traces without workflow identity.

PBKV-TA ranks the blocks of ended requests of such a trace by the follow-up hazard of their
inferred turn class (`agentrt/policies/turns.py`). This prints, per trace, how many requests
fall in each turn class (1, 2, 3+) and the share of them that a later request followed up
(re-sent the whole prompt): what the turn classes separate. Reads the trace in place.

    python benchmarks/turns.py                     # both Mooncake traces in ../shared/traces
    python benchmarks/turns.py my_trace.jsonl ...
"""

from __future__ import annotations

import argparse
from pathlib import Path

from agentrt.policies.turns import CLASSES, TurnHazard
from agentrt.trace.reader import TraceReader

SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces" / "mooncake"


def shares(path: Path) -> tuple[list[int], list[float]]:
    th = TurnHazard()
    for c in TraceReader(path):
        th.arrived(c.tenant, list(c.hash_ids), (c.timestamp or 0.0) / 1000.0)
    t = th._tenants.get("default")
    counts = [int(x) for x in t.requests] if t is not None else [0] * CLASSES
    return counts, th.followed_share("default")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", nargs="*", type=Path)
    args = ap.parse_args()
    paths = args.traces or [SHARED / "conversation_trace.jsonl", SHARED / "synthetic_trace.jsonl"]
    print("| trace | turn 1: requests, followed | turn 2 | turn 3+ |")
    print("| --- | --- | --- | --- |")
    for p in paths:
        if not p.exists():
            print(f"(skipped: {p} not found)")
            continue
        counts, share = shares(p)
        cells = " | ".join(f"{n:,}, {s:.0%}" for n, s in zip(counts, share))
        print(f"| {p.name} | {cells} |")


if __name__ == "__main__":
    main()

"""Small helpers the trace and workload tests share."""

from __future__ import annotations

from collections import defaultdict


def by_workflow(calls) -> dict[str, list]:
    """Calls grouped by workflow id, each group in file order."""
    out: dict[str, list] = defaultdict(list)
    for c in calls:
        out[c.workflow].append(c)
    return out

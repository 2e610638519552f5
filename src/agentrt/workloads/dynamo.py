"""Import NVIDIA Dynamo's agentic replay traces (`agentrt import dynamo FILE -o OUT`).

Input: "Agentic Mooncake" JSON Lines, as `request_trace_to_mooncake --agentic` writes them and
DynoSim replays them (`--trace-format agentic_mooncake`; ai-dynamo/dynamo docs/agents/
agent-replay.md and docs/dynosim/trace-formats.md; the row is `AgenticMooncakeRow` in
lib/data-gen). One row per LLM request:
`request_id` (required, unique), `session_id`, `input_length` (alias `input_tokens`; default
len(hash_ids) x block size), `output_length` (alias `output_tokens`, required), `hash_ids`
(required), `timestamp` (alias `created_time`, ms), `delay` (alias `delay_ms`, ms),
`tool_wait_ms`, `wait_for` (request ids), and `branches`, `prefix_reset`, `tool_events`, which
are metadata DynoSim does not schedule by (ignored here too). The file does not state its block
size (the converter prints it): `--block-size` must be the one it printed.

How rows become workflows (DynoSim's semantics, agentrt's format):
- A row with `wait_for` is issued when every listed request has finished, plus `delay` +
  `tool_wait_ms` (`think_ms`; its `timestamp` does not schedule it). A row without is issued at
  its `timestamp` (the earliest timestamp in the file is time 0, as DynoSim normalises).
- A workflow is a session together with every session joined to it by `wait_for` (a child
  session spawned by and joined into its parent), since `after` refers to calls of one workflow.
  It is named after the session of its first request; calls of that session have agent `main`,
  calls of the others `subagent` (the rows name no agent).
- Calls are in dependency order, ties in file order; `after` = `wait_for`. A later call without
  dependencies (a request the converter found no edge for) keeps its offset from the workflow's
  first call as `think_ms` after that call's start, so a closed-loop replay keeps it too.
- Hash ids are kept (Dynamo's ids are sequence hashes: chained, as the format requires; checked);
  ids past ceil(input_length / block size) carry no tokens and are dropped, as DynoSim
  synthesises only input_length tokens. Fewer ids than that is an error, as in DynoSim.
- Arrivals: open loop at the recorded starts (DynoSim's fixed schedule), or closed loop with
  `concurrency` workflows at once. Workflows are written in order of their start.
Rows of a newer agentic format (`dependencies` instead of `wait_for`) are refused by name.
Every bad row stops the import with file, line and field (`foreign.Row`).
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from agentrt.trace.chain import ChainCheck
from agentrt.trace.lines import objects
from agentrt.trace.limits import MAX_TOKENS, bad_workflow_id
from agentrt.trace.schema import Call, TraceHeader
from agentrt.workloads.foreign import Row, check_think, write_atomically


@dataclass(slots=True)
class Request:
    request_id: str
    session: str
    line: int
    input_length: int
    output_length: int
    hash_ids: list[int]
    timestamp: float | None
    think_ms: float
    wait_for: list[str]
    row: Row = field(repr=False)


@dataclass(slots=True)
class DynamoSummary:
    workflows: int = 0
    calls: int = 0
    sessions: int = 0
    joined: int = 0       # workflows that hold more than one session


def read_requests(path: str | Path, block_size: int) -> list[Request]:
    """Every row of the file, checked (types, bounds, ids, capacity, the chain rule)."""
    reqs: list[Request] = []
    seen: dict[str, int] = {}
    chain = ChainCheck()
    for line, obj in objects(path):
        r = Row(str(path), line, obj)
        if "dependencies" in obj:
            raise r.error("dependencies", "typed dependencies (a newer agentic trace format) are not "
                          "supported; this importer reads rows with 'wait_for' (docs/workloads.md)")
        rid = r.text("request_id")
        if not rid.strip():
            raise r.error("request_id", "must not be blank")
        if rid in seen:
            raise r.error("request_id", f"{rid!r} is also the request id of line {seen[rid]}")
        seen[rid] = line
        session = r.text("session_id", default=f"request_{line}")
        why = bad_workflow_id(session)
        if why:
            raise r.error("session_id", f"as a workflow id it {why}")
        ids = r.items("hash_ids", int)
        if "hash_ids" not in obj:
            raise r.error("hash_ids", "required")
        if any(h < 0 for h in ids):
            raise r.error("hash_ids", "ids must be >= 0")
        n_in = r.int("input_length", lo=1, aliases=("input_tokens",),
                     default=min(len(ids) * block_size, MAX_TOKENS) or None)
        if n_in is None:
            raise r.error("hash_ids", "empty, and no input_length: the request has no prompt")
        need = -(-n_in // block_size)
        if len(ids) < need:
            raise r.error("input_length", f"{n_in:,} tokens need {need} hash ids at block size "
                          f"{block_size}, the row has {len(ids)} (is --block-size the block size "
                          f"the converter printed?)")
        ids = ids[:need]
        bad = chain.check("default", ids, n_in // block_size, [])
        if bad is not None:
            raise r.error(bad[0], bad[1])
        delay = (r.number("delay", aliases=("delay_ms",)) or 0.0) + (r.number("tool_wait_ms") or 0.0)
        reqs.append(Request(rid, session, line, n_in,
                            r.int("output_length", aliases=("output_tokens",)), ids,
                            r.number("timestamp", aliases=("created_time",)),
                            check_think(r, "tool_wait_ms", delay), r.items("wait_for", str),
                            Row(r.path, line, {})))     # the row itself is not kept
    for q in reqs:
        for dep in q.wait_for:
            if dep not in seen:
                raise q.row.error("wait_for", f"waits for {dep!r}, which no row of the file is")
            if dep == q.request_id:
                raise q.row.error("wait_for", "a request cannot wait for itself")
    return reqs


def _components(reqs: list[Request]) -> list[list[Request]]:
    """Sessions joined by `wait_for` edges, each a list of its requests in file order."""
    parent: dict[str, str] = {}

    def root(s: str) -> str:
        while parent.setdefault(s, s) != s:
            parent[s] = parent[parent[s]]
            s = parent[s]
        return s
    by_id = {q.request_id: q for q in reqs}
    for q in reqs:
        for dep in q.wait_for:
            a, b = root(q.session), root(by_id[dep].session)
            if a != b:
                parent[max(a, b)] = min(a, b)
    groups: dict[str, list[Request]] = defaultdict(list)
    for q in reqs:
        groups[root(q.session)].append(q)
    return list(groups.values())


def _ordered(group: list[Request]) -> list[Request]:
    """The group's requests in dependency order, ties in file order (a cycle is an error)."""
    ids = {q.request_id for q in group}
    waiting = {q.request_id: len(set(q.wait_for)) for q in group}
    followers: dict[str, list[Request]] = defaultdict(list)
    for q in group:
        for dep in set(q.wait_for):
            followers[dep].append(q)
    ready = [(q.line, q.request_id, q) for q in group if not q.wait_for]
    heapq.heapify(ready)
    out: list[Request] = []
    while ready:
        q = heapq.heappop(ready)[2]
        out.append(q)
        for f in followers[q.request_id]:
            waiting[f.request_id] -= 1
            if waiting[f.request_id] == 0:
                heapq.heappush(ready, (f.line, f.request_id, f))
    if len(out) < len(ids):
        stuck = min((q for q in group if waiting[q.request_id] > 0), key=lambda q: q.line)
        raise stuck.row.error("wait_for", "its dependencies form a cycle, so it can never be issued")
    return out


def _calls(order: list[Request], t0: float) -> list[Call]:
    first = order[0]
    start = first.timestamp if first.timestamp is not None else t0
    index = {q.request_id: i for i, q in enumerate(order)}
    calls = []
    for i, q in enumerate(order):
        if i == 0:
            ts, after, think = round(start - t0, 3), (), 0.0
        elif q.wait_for:
            ts, after, think = None, tuple(sorted({index[d] for d in q.wait_for})), q.think_ms
        else:
            offset = (q.timestamp - start) if q.timestamp is not None else 0.0
            ts, after, think = None, (), check_think(q.row, "timestamp", max(0.0, offset))
        calls.append(Call(workflow=first.session, call=i, input_length=q.input_length,
                          output_length=q.output_length, hash_ids=q.hash_ids,
                          agent="main" if q.session == first.session else "subagent",
                          timestamp=ts, after=after, think_ms=think, last=i == len(order) - 1,
                          line=q.line))
    return calls


def dynamo_workflows(reqs: list[Request]) -> tuple[list[list[Call]], DynamoSummary]:
    """The workflows of the requests, in order of their starts, and what was imported."""
    stamps = [q.timestamp for q in reqs if q.timestamp is not None]
    t0 = min(stamps) if stamps else 0.0
    orders = [_ordered(g) for g in _components(reqs)]
    orders.sort(key=lambda o: (o[0].timestamp if o[0].timestamp is not None else t0, o[0].line))
    summary = DynamoSummary(sessions=len({q.session for q in reqs}))
    wfs = []
    for o in orders:          # a session is in one group, so workflow names are distinct
        wfs.append(_calls(o, t0))
        summary.joined += len({q.session for q in o}) > 1
    summary.workflows = len(wfs)
    summary.calls = len(reqs)
    return wfs, summary


def import_dynamo(src: str | Path, out: str | Path, block_size: int,
                  concurrency: int | None = None) -> DynamoSummary:
    """Import the agentic Mooncake file `src` into the workflow trace `out` (replaced only when
    complete)."""
    wfs, summary = dynamo_workflows(read_requests(src, block_size))
    header = TraceHeader(block_size=block_size, name="dynamo-import",
                         description="NVIDIA Dynamo agentic Mooncake trace imported by agentrt",
                         source=f"Dynamo agentic trace {src}", concurrency=concurrency)
    write_atomically(out, header, (c for wf in wfs for c in wf))
    return summary

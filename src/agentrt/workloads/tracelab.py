"""Import TraceLab coding-agent round traces (`agentrt import tracelab FILE -o OUT`).

Input: the normalized round trace of uw-syfi/TraceLab (`round_trace.jsonl`, the released
`syfi_coding_trace.jsonl.gz`; README "Data format", example_sessions/sanitized/): one JSON object
per LLM round of a Claude Code or Codex session. Fields read: `session_id`, `round_index`,
`provider`, `input_tokens_total`, `prefix_tokens`, `newly_append_tokens` (their sum must be the
total, TraceLab's identity), `output_tokens`, `first_input_event_type`, `tools[]`
(`tool_internal_latency_ms`, `tool_wall_latency_ms`) and `timing_events[]` (`event_type`,
`timestamp`); the rest is ignored. Rows of a session are ordered by (`round_index`, file order),
as TraceLab orders them (duplicate round indices are kept, as TraceLab keeps them).

How a session becomes a workflow (one agent, named after `provider`):
- Prompts. A round's prompt shares its first `prefix_tokens` tokens (the provider's prompt-cache
  hit) with the previous round's context, its prompt followed by its output, as far as that
  context reaches; the rest (`newly_append_tokens`, plus any prefix beyond the context) is new
  content of the session. The first round's prompt is all new: what its prefix was cached from
  (an earlier session, the harness's system prompt) is not in the trace, so sessions share no
  blocks. Hash ids come from these segments (`BlockHasher`), chained as the format requires.
- Waits (`think_ms` before a round): a round whose first input is a tool result waits the longest
  effective latency of the previous round's tools (TraceLab's definition: the runner-reported
  `tool_internal_latency_ms` when present, else the observed `tool_wall_latency_ms`; tools of one
  round are taken to run side by side). A round that starts with a user message waits TraceLab's
  human input wait: from the previous round's last model-output event (`reasoning`, `text`,
  `tool_call`) to this round's first `user_message` (0 where either timestamp is missing:
  counted in `untimed`). Other rounds follow at once.
- Arrivals: closed loop with `concurrency` sessions at once, or Poisson at `rate` sessions per
  second (the recorded wall-clock starts span months of 43 developers' work). Sessions are
  written in order of first appearance.
Every bad row stops the import with file, line and field (`foreign.Row`). Rounds are held in
memory (a few numbers each); the trace's size follows prompt tokens / block size, so coding
sessions' 30k-50k-token prompts want a larger `block_size` for the full dataset.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from agentrt.trace.lines import objects
from agentrt.trace.limits import MAX_INDEX, bad_workflow_id
from agentrt.trace.schema import Call, TraceHeader
from agentrt.workloads.base import AgentThread, GenConfig, WorkflowBuilder
from agentrt.workloads.foreign import Row, Starts, check_think, iso_ms, write_atomically
from agentrt.workloads.hashing import BlockHasher, Segment

OUTPUT_EVENTS = frozenset(("reasoning", "text", "tool_call"))


@dataclass(slots=True)
class Round:
    index: int
    line: int
    agent: str
    input_tokens: int
    prefix_tokens: int
    output_tokens: int
    first_input: str | None
    tool_ms: float               # longest effective latency of its tools (the next round's wait)
    user_at: float | None        # its first user_message (ms since the epoch)
    output_end: float | None     # its last model-output event
    row: Row


@dataclass(slots=True)
class TraceLabSummary:
    workflows: int = 0
    calls: int = 0
    tool_waits: int = 0          # rounds issued after the previous round's tools
    human_waits: int = 0         # rounds issued after a user message with both timestamps known
    untimed: int = 0             # rounds after a user message whose wait could not be timed


def _tool_ms(r: Row) -> float:
    best = 0.0
    for t in r.nested("tools"):
        internal = t.number("tool_internal_latency_ms")
        wall = t.number("tool_wall_latency_ms")
        ms = internal if internal is not None else wall
        if ms is not None and ms > best:
            best = ms
    return best


def _times(r: Row) -> tuple[float | None, float | None]:
    """(first user_message, last model-output event) of the round, ms since the epoch."""
    user = end = None
    for e in r.nested("timing_events"):
        kind = e.text("event_type", default="")
        if kind != "user_message" and kind not in OUTPUT_EVENTS:
            continue
        raw = e.obj.get("timestamp")
        t = iso_ms(raw)
        if t is None:
            if raw is None:
                continue
            raise e.error("timestamp", f"not an ISO-8601 time: {raw!r}"[:120])
        if kind == "user_message":
            user = t if user is None else min(user, t)
        else:
            end = t if end is None else max(end, t)
    return user, end


def read_sessions(path: str | Path) -> dict[str, list[Round]]:
    """Rounds by session (sessions in order of first appearance, rounds in TraceLab's order)."""
    sessions: dict[str, list[Round]] = {}
    for line, obj in objects(path):
        r = Row(str(path), line, obj)
        sid = r.text("session_id")
        why = bad_workflow_id(sid)
        if why:
            raise r.error("session_id", f"as a workflow id it {why}")
        total = r.int("input_tokens_total", lo=1)
        prefix = r.int("prefix_tokens", hi=total)
        if r.int("newly_append_tokens", hi=total) != total - prefix:
            raise r.error("newly_append_tokens", f"must be input_tokens_total - prefix_tokens "
                          f"({total:,} - {prefix:,}), got {obj['newly_append_tokens']:,}")
        user, end = _times(r)
        sessions.setdefault(sid, []).append(Round(
            r.int("round_index", hi=MAX_INDEX), line, r.text("provider", default="agent"), total,
            prefix, r.int("output_tokens"), r.text("first_input_event_type", default=None),
            _tool_ms(r), user, end, Row(r.path, line, {})))
    for rounds in sessions.values():
        rounds.sort(key=lambda x: (x.index, x.line))
    return sessions


def _head(segments: list[Segment], n: int) -> list[Segment]:
    """The first `n` tokens of a segment list (a cut segment keeps its key: same leading blocks)."""
    out: list[Segment] = []
    for key, k in segments:
        if n <= 0:
            break
        out.append((key, min(k, n)))
        n -= k
    return out


class TraceLabImporter:
    """Sessions -> workflows; one hasher for the whole file."""

    def __init__(self, *, block_size: int = 16, rate: float | None = None,
                 concurrency: int | None = None, seed: int = 0) -> None:
        self.cfg = GenConfig(workflows=1, rate=rate, concurrency=concurrency, seed=seed,
                             block_size=block_size)
        self.hasher = BlockHasher(block_size)
        self.starts = Starts(rate, seed)
        self.rng = np.random.default_rng(seed)     # the builder's; nothing here is drawn
        self.summary = TraceLabSummary()

    def header(self, source: str) -> TraceHeader:
        return TraceHeader(block_size=self.cfg.block_size, name="tracelab-import",
                           description="TraceLab coding-agent sessions imported by agentrt",
                           source=source,
                           concurrency=self.cfg.concurrency if self.cfg.rate is None else None)

    def _wait(self, prev: Round, cur: Round) -> float:
        s = self.summary
        if cur.first_input == "tool_result":
            s.tool_waits += prev.tool_ms > 0
            return prev.tool_ms
        if cur.first_input == "user_message":
            if cur.user_at is None or prev.output_end is None:
                s.untimed += 1
                return 0.0
            s.human_waits += 1
            return check_think(cur.row, "timing_events", max(0.0, cur.user_at - prev.output_end))
        return 0.0

    def workflow(self, sid: str, rounds: list[Round]) -> list[Call]:
        b = WorkflowBuilder(self.hasher, sid, self.cfg.tenant, self.starts.next(),
                            self.rng, self.cfg)
        context: list[Segment] = []
        for k, rnd in enumerate(rounds):
            size = sum(n for _, n in context)
            shared = _head(context, min(rnd.prefix_tokens, size))
            new: Hashable = ("tracelab", sid, k)
            b.threads[rnd.agent] = AgentThread(shared)
            b.call(rnd.agent, [(new, rnd.input_tokens - min(rnd.prefix_tokens, size))],
                   rnd.output_tokens, think_ms=self._wait(rounds[k - 1], rnd) if k else 0.0,
                   output_key=(new, "out"))
            context = b.threads[rnd.agent].segments
        calls = b.finish()
        for c, rnd in zip(calls, rounds):
            c.line = rnd.line
        self.summary.workflows += 1
        self.summary.calls += len(calls)
        return calls

    def calls(self, sessions: dict[str, list[Round]]) -> Iterator[Call]:
        for sid, rounds in sessions.items():
            yield from self.workflow(sid, rounds)


def import_tracelab(src: str | Path, out: str | Path,
                    importer: TraceLabImporter | None = None) -> TraceLabSummary:
    """Import the round trace `src` into the workflow trace `out` (replaced only when complete)."""
    imp = importer or TraceLabImporter()
    sessions = read_sessions(src)
    write_atomically(out, imp.header(f"TraceLab round trace {src}"), imp.calls(sessions))
    return imp.summary

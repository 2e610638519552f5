"""Turns a streamed trace into call arrivals: closed loop within workflows, open loop across them.

- A workflow's first call arrives at its `timestamp`.
- A later call is issued at max(its `timestamp`, when the last of its `after` calls finished +
  `think_ms`): the closed loop of an agent framework waiting on its own calls and tools.
- A workflow ends when its `last` call has finished, and with it every other call of the
  workflow (a fan-out branch may outlive the `last` call). In a file without `last` flags it
  ends when its known calls have finished and the file holds no more of its calls, looking at
  most `READ_AHEAD` calls past its latest one: a workflow unseen for that long is over, so the
  replay buffers a bounded window, not the rest of the file. Once the replay has read a `last`
  flag (on a named workflow) it trusts the flags and looks ahead without bound, as before.
  A call found after its workflow was ended this way starts a new workflow if it has a
  timestamp, and is an error if it has none.
- A Mooncake trace (one call per workflow) is therefore replayed open loop at its timestamps.
- `time_scale` stretches trace timestamps (arrival and release times, not think times): 2.0
  replays an open-loop trace at half its request rate.
- With `concurrency` N (the trace header's agentrt extension, or a bench option) workflows start
  closed loop instead: at most N run at once and the next starts, in file order, when one ends
  (not before its own timestamp).

Streaming: lines are read lazily. Workflow starts are assumed to be in timestamp order in the file
(as logs and the Mooncake traces are); a start read later than the replay's clock arrives late and
is counted in `late_arrivals`. When a workflow needs its next call and it has not been read yet,
the replay reads ahead until it finds it, buffering what it passes.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterator

from agentrt.errors import AgentrtError, TraceError
from agentrt.trace.limits import GENERATED_PREFIX
from agentrt.trace.schema import Call

MS = 1e-3
READ_AHEAD = 10_000   # calls: how far a file without `last` flags is searched for a workflow's next call


class FileCalls:
    """An iterator of a trace file's calls that knows the file, so a replay error names it."""

    __slots__ = ("path", "_calls")

    def __init__(self, calls: Iterator[Call], path: str) -> None:
        self.path = path
        self._calls = calls

    def __iter__(self) -> "FileCalls":
        return self

    def __next__(self) -> Call:
        return next(self._calls)


class _Workflow:
    __slots__ = ("pending", "finished", "outstanding", "start", "first_arrival", "last_seen", "ended",
                 "seen_at", "last_done")

    def __init__(self, start: float) -> None:
        self.start = start
        self.pending: dict[int, Call] = {}
        self.finished: dict[int, float] = {}
        self.outstanding = 0
        self.first_arrival: float | None = None
        self.last_seen = False
        self.ended = False
        self.seen_at = 0          # calls read when its latest call was read
        self.last_done = False    # its `last` call has finished


class WorkflowReplay:
    def __init__(self, calls: Iterator[Call], concurrency: int | None = None,
                 time_scale: float = 1.0) -> None:
        """`calls`: an iterator of calls; a `FileCalls` has the file its errors name."""
        if concurrency is not None and concurrency <= 0:
            raise ValueError(f"concurrency must be > 0, got {concurrency}")
        if time_scale <= 0:
            raise ValueError(f"time_scale must be > 0, got {time_scale}")
        self._calls = calls
        self._ts = MS * time_scale     # trace timestamps (ms) -> replay seconds
        self.concurrency = concurrency
        self._starts: deque[Call] = deque()   # closed loop: workflow starts waiting for a slot
        self.active = 0
        self._eof = False
        self._frontier = float("-inf")   # timestamp (s) of the latest workflow start read
        self._arrivals: list = []        # (time, seq, Call)
        self._seq = 0
        self.workflows: dict[str, _Workflow] = {}
        self.calls_read = 0
        self.workflows_seen = 0
        self.late_arrivals = 0
        self._flagged = False            # a named workflow's `last` flag has been read
        self._clock = float("-inf")      # the latest time the engine asked about

    # ----------------------------------------------------------------- reading
    def _read_one(self) -> bool:
        if self._eof:
            return False
        try:
            c = next(self._calls)
        except StopIteration:
            self._eof = True
            return False
        self.calls_read += 1
        wf = self.workflows.get(c.workflow)
        if wf is None:
            if c.timestamp is None:
                why = (f"workflow {c.workflow!r} has no 'last' flags and none of its calls appeared "
                       f"in the {READ_AHEAD:,} calls before this one, so the replay had ended it; "
                       f"mark each workflow's final call 'last': true")
                path = getattr(self._calls, "path", None)
                if path is None:
                    raise AgentrtError(f"trace line {c.line}: field 'workflow': {why}")
                raise TraceError(path, c.line, "workflow", why)
            t = c.timestamp * self._ts
            if self.concurrency is None and t < self._clock:
                self.late_arrivals += 1
            wf = self.workflows[c.workflow] = _Workflow(t)
            self.workflows_seen += 1
            if t > self._frontier:
                self._frontier = t
            wf.outstanding += 1
            if self.concurrency is None:
                self._schedule(t, c)
            else:
                self._starts.append(c)
        else:
            wf.pending[c.call] = c
            self._try_release(wf, c)
        wf.seen_at = self.calls_read
        if c.last:
            wf.last_seen = True
            if not self._flagged and not c.workflow.startswith(GENERATED_PREFIX):
                self._flagged = True
        return True

    def _may_follow(self, wf: _Workflow) -> bool:
        """Whether a later call of `wf` may still be read (see the module docstring)."""
        return not self._eof and (self._flagged or self.calls_read - wf.seen_at < READ_AHEAD)

    def _schedule(self, t: float, c: Call) -> None:
        self._seq += 1
        heapq.heappush(self._arrivals, (t, self._seq, c))

    def _try_release(self, wf: _Workflow, c: Call) -> None:
        fin = wf.finished
        if all(a in fin for a in c.after):
            ready = max((fin[a] for a in c.after), default=wf.start) + c.think_ms * MS
            if c.timestamp is not None:
                ready = max(ready, c.timestamp * self._ts)
            del wf.pending[c.call]
            wf.outstanding += 1
            self._schedule(ready, c)

    def _fill_slots(self, now: float) -> None:
        """Closed loop: start workflows while fewer than `concurrency` are active."""
        while self.active < self.concurrency:
            while not self._starts and self._read_one():
                pass
            if not self._starts:
                return
            c = self._starts.popleft()
            self.active += 1
            wf = self.workflows[c.workflow]
            wf.start = max(wf.start, now)
            self._schedule(wf.start, c)
            # read on to the next workflow's start: this one's calls that need nothing before
            # them (`after: []`, run beside its first) are issued at its start, not late
            while not self._starts and self._read_one():
                pass

    # ----------------------------------------------------------------- engine side
    def next_arrival(self) -> float | None:
        """Time of the earliest known arrival, reading ahead until one is known or the file ends."""
        if self.concurrency is not None:
            self._fill_slots(self._clock)
            return self._arrivals[0][0] if self._arrivals else None
        while not self._arrivals and self._read_one():
            pass
        if self._arrivals:
            # a start not yet read could be earlier only if the file is out of order
            while not self._eof and self._frontier <= self._arrivals[0][0] and self._read_one():
                pass
            return self._arrivals[0][0]
        return None

    def pop_arrivals(self, now: float) -> list[tuple[float, Call]]:
        """Calls issued at or before `now`, in arrival order, with their issue times."""
        self._clock = now
        if self.concurrency is not None:
            self._fill_slots(now)
        while self.concurrency is None and not self._eof and self._frontier <= now and self._read_one():
            pass
        out = []
        arr = self._arrivals
        while arr and arr[0][0] <= now:
            t, _, c = heapq.heappop(arr)
            wf = self.workflows[c.workflow]
            if wf.first_arrival is None:
                wf.first_arrival = t
            out.append((t, c))
        return out

    def finish(self, c: Call, now: float) -> tuple[float, _Workflow | None]:
        """Record that `c` finished at `now` and release its successors.

        Returns (the shortest tool or human wait, ms, of the successors it releases, 0.0 if none
        waits: a tool call; the workflow if it ended).
        """
        wf = self.workflows[c.workflow]
        wf.finished[c.call] = now
        wf.outstanding -= 1
        if c.last:
            wf.last_done = True
        if not wf.last_done and not wf.pending and not wf.last_seen:
            # its next call is further down the file (or the file ends without a 'last' flag)
            while not wf.pending and not wf.last_seen and self._may_follow(wf) and self._read_one():
                pass
        tool_ms = min((p.think_ms for p in wf.pending.values() if c.call in p.after and p.think_ms > 0),
                      default=0.0)
        for p in list(wf.pending.values()):
            self._try_release(wf, p)
        idle = wf.outstanding == 0 and not wf.pending
        if idle and (wf.last_done or (not wf.last_seen and not self._may_follow(wf))):
            wf.ended = True
            del self.workflows[c.workflow]
            if self.concurrency is not None:
                self.active -= 1
                self._fill_slots(now)
            return tool_ms, wf
        return tool_ms, None

    @property
    def done(self) -> bool:
        return self._eof and not self._arrivals and not self._starts


class DelayedArrivals:
    """A replay whose calls reach the engine some time after they are issued: the path of a
    request through an API server before the engine sees it (a measured engine's
    `request_overhead_s`), plus `per_stream` for each call already in flight (issued, not
    finished) when it is read: an API server that streams other calls' tokens takes a new call
    in later (`request_overhead_per_stream_s`). Arrival times stay the issue times, so TTFT and
    end-to-end latency include the delay, as a client measures them. A call is read once it may
    have arrived (its issue time + `delay`), so the calls in flight are counted then; `delay`
    alone is a lower bound on every call's path, which is when the engine is woken."""

    __slots__ = ("inner", "delay", "per_stream", "in_flight", "_ready", "_seq")

    def __init__(self, inner: WorkflowReplay, delay: float, per_stream: float = 0.0) -> None:
        self.inner = inner
        self.delay = delay
        self.per_stream = per_stream
        self.in_flight = 0
        self._ready: list[tuple[float, int, float, Call]] = []    # (reaches the engine, order, issued, call)
        self._seq = 0

    @property
    def late_arrivals(self) -> int:
        return self.inner.late_arrivals

    def next_arrival(self) -> float | None:
        t = self.inner.next_arrival()
        t = None if t is None else t + self.delay
        if self._ready and (t is None or self._ready[0][0] < t):
            return self._ready[0][0]
        return t

    def pop_arrivals(self, now: float) -> list[tuple[float, Call]]:
        issued = self.inner.pop_arrivals(now - self.delay)
        if not self.per_stream and not self._ready:
            self.in_flight += len(issued)
            return issued
        ready = self._ready
        for t, c in issued:
            self._seq += 1
            heapq.heappush(ready, (t + self.delay + self.per_stream * self.in_flight, self._seq, t, c))
            self.in_flight += 1
        out = []
        while ready and ready[0][0] <= now:
            _, _, t, c = heapq.heappop(ready)
            out.append((t, c))
        return out

    def finish(self, c: Call, now: float):
        self.in_flight -= 1
        return self.inner.finish(c, now)

"""What admitting a new workflow into an over-committed GPU pool costs, against what holding it costs.

Model (the `agent` scheduler's workflow admission, `agent.py`)
- The live workflows' contexts (`contexts.py`) plus a new workflow's do not fit in the pool
  beside what running requests hold. Admitting it over-commits the pool by the blocks that do
  not fit, at most the new workflow's own context. That context is expected to grow to the mean
  final context of the finished workflows of its class (the blocks on its deepest path when it
  ended); its first call's prompt and output while no workflow of the class has ended.
- Over-committed, the pool cannot keep every live context across a cycle (the time from one call
  of a workflow to its next: its call and its tool time, the mean over the recent gaps of every
  workflow): about the over-committed blocks are computed again each cycle, a prefill of
  `blocks x block_size` tokens that takes the engine `view.prefill_seconds(tokens)`. Parallel
  calls count as calls (a gap of 0): a subagent's call reads its own context, so a workflow
  running several threads reads contexts that much more often. Instances of a fan-out that
  share one prefix are over-counted by this, which makes the rule hold a little more there;
  counting steps instead under-counts subagents, and on the coding workload past the knee it
  admitted too much.
- That prefill delays every request in the engine (running and waiting, the new workflow's
  first call among them), so admitting costs `prefill_seconds / cycle x requests` seconds of
  waiting per second; holding costs one (the held workflow waits). Hold while the first is at
  least one.
  Both last until a live workflow ends and frees its context, so comparing the rates compares
  the totals.
- Nothing is known before a workflow has made two calls (no cycle): hold, as the working-set
  rule alone does.
So a replica with short contexts, or spare compute (few requests), lets a workflow in and pays a
little recomputation; a busy replica whose contexts are long holds it, because there the
recomputation would slow everyone and spiral. Every quantity is measured online or is the
engine's own cost; there is no threshold to tune.
"""

from __future__ import annotations

from agentrt.runtime.window import SampleWindow, window_in


class OvercommitCost:
    __slots__ = ("contexts", "gaps", "last_arrival", "window", "max_classes")

    def __init__(self, window: int = 512, max_classes: int = 4096) -> None:
        self.window = window
        self.max_classes = max_classes
        self.contexts: dict[tuple[str, str], SampleWindow] = {}   # class -> final context blocks
        self.gaps = SampleWindow(window)                          # seconds between a workflow's calls
        self.last_arrival: dict[tuple[str, str], float] = {}      # live workflow -> its latest call

    def arrived(self, workflow: tuple[str, str], now: float) -> None:
        """A call of `workflow` arrived at `now`."""
        last = self.last_arrival.get(workflow)
        if last is not None and now >= last:
            self.gaps.add(now - last)
        self.last_arrival[workflow] = now

    def ended(self, workflow: tuple[str, str], cls: tuple[str, str] | None, context_blocks: int) -> None:
        """`workflow` of class `cls` ended with a context of `context_blocks` blocks."""
        self.last_arrival.pop(workflow, None)
        if cls is None or context_blocks <= 0:
            return
        window_in(self.contexts, cls, self.max_classes, lambda: SampleWindow(self.window)).add(float(context_blocks))

    def expected_context(self, cls: tuple[str, str] | None, own_blocks: int) -> int:
        w = self.contexts.get(cls) if cls is not None else None
        expected = w.mean(0.0) if w is not None else 0.0
        return max(own_blocks, int(round(expected)))

    def worth_holding(self, cls: tuple[str, str] | None, own_blocks: int, live_blocks: int,
                      free_blocks: int, block_size: int, view) -> bool:
        """Whether holding a new workflow (class `cls`, `own_blocks` to add now) costs less than
        admitting it beside `live_blocks` of live contexts when `free_blocks` are not held by
        running requests."""
        if not self.gaps:
            return True
        context = self.expected_context(cls, own_blocks)
        over = min(live_blocks + context - free_blocks, context)
        if over <= 0:
            return False
        cycle = self.gaps.mean(0.0)
        if cycle <= 0.0:
            return True
        recompute_s = view.prefill_seconds(over * block_size)
        return recompute_s / cycle * view.requests >= 1.0

    def __len__(self) -> int:
        return len(self.last_arrival) + sum(len(w) for w in self.contexts.values()) + len(self.gaps)

"""`coding`: long coding-agent sessions, as Claude Code, OpenHands and SWE-agent run them.

Agents and control flow:
- main: one thread per session. Its prompt is the system prompt with the tool definitions (its
  anchor), the project's memory file and environment (CLAUDE.md, git status), then the user's
  request. Every turn the model emits a tool call, or an edit, or at the end its answer; the tool
  runs as think time (`workloads.tools`, by the phase of the work: exploring reads and searches,
  editing edits and reads, verifying runs tests) and the next turn's prompt is the same thread
  extended by that output and the tool's result. Short outputs, huge prompts.
- explore: now and then the main agent delegates a search to 1 to 3 explore subagents at once
  (Claude Code's Task tool with its Explore subagent; OpenHands' delegation). Each has its own
  thread: its anchor (shared by every workflow), the task the main agent wrote for it, then 2 to
  10 turns of its own read and search loop; its last output is a summary. The main agent's next
  call reads every summary (fan-out from the spawning call, fan-in with `after`).
- compact: when the main thread (with the result about to join it) passes the session's threshold,
  a compaction call extends the thread with the compaction prompt and writes a summary; the main
  thread restarts from anchor, memory and summary, a new chain after those shared blocks, so every
  block of the old history is dead from then on.
- the user: when the agent answers, a follow-up request comes with probability sigmoid(breadth -
  1.2) (23 % to 45 %, guess), at most twice, after a `human` think time; the thread goes on.

Hidden state: difficulty d in [0, 1] sets the turns a request needs, 12 exp(1.6 d) + Poisson(3)
(log-uniform from 12 to 59, plus 3 on average; median about 30; follow-ups a third of that);
the agent answers with logit 0.8 (turn - needed). Breadth w in [0, 1] sets delegation: a spawn
with logit -4 + 2.4 w - 2 progress (one or two rounds per session; guess). Signals carry d, w,
progress, context fill and the decision the call leads to (answer, spawn).

Sources and sizes:
- Turns: agents on SWE-bench-style tasks run tens of steps: median trajectories of 29 to 78
  steps for four models under SWE-agent on SWE-Bench Pro (nilenso's SWE-Bench Pro trajectory
  analysis, 2,920 trajectories); failed runs are longer and more varied (Majgaonkar et al. 2025,
  OpenHands and SWE-agent on SWE-bench). The log-uniform 12 to 60 per request is a guess inside
  that range.
- Phases: resolved trajectories go localise, patch, validate (Liu et al. 2025, "Process-centric
  analysis of agentic software systems", SWE-agent and OpenHands on SWE-bench Verified): the
  phase switches at 40 % and 80 % of the needed turns and the tool shares per phase are guesses.
- System prompt and tools: 12,000 tokens (guess; a Claude Code bug report expects its built-in
  tool definitions alone to take about 10k to 15k tokens in `/context`, anthropics/claude-code#57235);
  explore subagents 5,000 (guess: a shorter prompt and read-only tools). Memory file and
  environment lognormal, median 1,500 tokens, clipped 200 to 6,000; requests median 150, clipped
  20 to 3,000 (guesses).
- Outputs: tool calls lognormal, median 100 tokens, clipped 30 to 300; edits median 600, clipped
  300 to 1,500; answers median 250; subagent tasks median 150; subagent summaries median 600;
  compaction summaries median 3,000, clipped 1,000 to 8,000 (guesses).
- Tool results (tokens, lognormal median / clip, guesses): file reads 1,500 / 100 to 12,000
  (Claude Code's Read tool returns up to 2,000 lines by default); searches 500 / 30 to 5,000;
  edits 250 / 50 to 1,500; shell 300 / 10 to 8,000 and test runs 1,500 / 100 to 8,000 (harnesses
  truncate long command output: Claude Code's Bash tool at 30,000 characters); scripts 300 / 10
  to 4,000.
- Compaction threshold: uniform 80k to 100k tokens per session (guess: 65 to 80 % of the 128k
  windows of open models served by vLLM; Claude Code compacts at about 83 % of its 200k window,
  anthropics/claude-code#86863), so contexts grow towards 1e5 tokens. Harnesses differ widely:
  mini-SWE-agent's successful SWE-bench Verified trajectories mostly stay under 20k tokens (Raju
  et al. 2026, arXiv 2602.16069); this workload models the long end, where an agent starts from a
  12k-token prompt and works for tens of turns.

Options (`agentrt generate coding --set OPTION=VALUE`; the defaults are the shape above, and a
trace generated with them is the same as before the options existed): `system_tokens` (the main
agent's system prompt and tools, 12,000), `compact_min` / `compact_max` (the range of the
per-session compaction threshold, 80,000 / 100,000 tokens), `turns_scale` (multiplies the turns a
request needs, 1), `max_turns` (the step budget per request, 90), `explore_sessions` (the share of
sessions that may delegate to explore subagents at all, 1: every session, by its breadth; below
1, one more coin per session decides it). The long end some harnesses run (a 14k-token prompt,
compaction past 120k tokens, half the sessions delegating) is, for example, `system_tokens=14000
compact_min=120000 compact_max=120000 turns_scale=3 max_turns=200 explore_sessions=0.5`.
"""

from __future__ import annotations

import math

from agentrt.workloads.base import Workload, WorkflowBuilder, lognormal_tokens
from agentrt.workloads.hashing import Segment

MAIN, EXPLORE, COMPACT = "main", "explore", "compact"
MAX_TURNS = 90          # per request: the agent's step budget (guess; option `max_turns`)
MAX_FOLLOWUPS = 2
MAX_SPAWNS = 3          # explore rounds per request (guess)
# tool -> (median, sigma, lo, hi) of its result in tokens (guesses; see the docstring)
RESULT = {"file_read": (1500, 0.8, 100, 12_000), "search": (500, 0.9, 30, 5000),
          "file_edit": (250, 0.5, 50, 1500), "shell": (300, 1.1, 10, 8000),
          "test_run": (1500, 0.9, 100, 8000), "code_exec": (300, 1.0, 10, 4000)}
# the tools a turn uses by phase: exploring, editing, verifying (shares are guesses)
PHASE_TOOLS = (
    (("file_read", "search", "shell", "code_exec"), (0.45, 0.35, 0.15, 0.05)),
    (("file_edit", "file_read", "search", "shell", "test_run", "code_exec"),
     (0.35, 0.3, 0.1, 0.1, 0.1, 0.05)),
    (("test_run", "file_edit", "file_read", "shell", "code_exec"), (0.35, 0.25, 0.15, 0.15, 0.1)),
)
EXPLORE_TOOLS = ("search", "file_read")


def _tokens(segments: list[Segment]) -> int:
    return sum(n for _, n in segments)


class CodingWorkload(Workload):
    name = "coding"
    summary = "long coding-agent sessions: main tool loop, explore subagents, context compaction"
    system = {MAIN: 12_000, EXPLORE: 5_000}
    expected = {"calls_per_workflow": (25.0, 70.0), "prompt_tokens": (25_000.0, 60_000.0),
                "output_tokens": (100.0, 400.0), "reuse_within": (0.85, 0.99),
                "reuse_across": (0.003, 0.05)}

    def __init__(self, system_tokens: int = 12_000, compact_min: int = 80_000,
                 compact_max: int = 100_000, turns_scale: float = 1.0, max_turns: int = MAX_TURNS,
                 explore_sessions: float = 1.0) -> None:
        if system_tokens < 1:
            raise ValueError(f"system_tokens must be >= 1, got {system_tokens}")
        if not 0 < compact_min <= compact_max:
            raise ValueError(f"need 0 < compact_min <= compact_max, got {compact_min}, {compact_max}")
        if not (turns_scale > 0 and math.isfinite(turns_scale)):
            raise ValueError(f"turns_scale must be > 0, got {turns_scale}")
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        if not 0.0 <= explore_sessions <= 1.0:
            raise ValueError(f"explore_sessions must be in [0, 1], got {explore_sessions}")
        self.system = {MAIN: int(system_tokens), EXPLORE: type(self).system[EXPLORE]}
        self.compact = (int(compact_min), int(compact_max))
        self.turns_scale = float(turns_scale)
        self.max_turns = int(max_turns)
        self.explore_sessions = float(explore_sessions)

    def _result(self, b: WorkflowBuilder, call: int, tool: str) -> Segment:
        return (("result", b.workflow, call), lognormal_tokens(b.rng, *RESULT[tool]))

    def _explore(self, b: WorkflowBuilder, spawn: int, tasks: list[Segment], state: dict) -> list[int]:
        """Subagents in parallel from call `spawn`; returns each one's last (summary) call."""
        rng = b.rng
        turns = [2 + min(8, int(rng.poisson(3))) for _ in tasks]
        threads = [f"{EXPLORE}/{spawn}/{j}" for j in range(len(tasks))]
        pending = {t: [self.anchor(EXPLORE), task] for t, task in zip(threads, tasks)}
        last = dict.fromkeys(threads, spawn)
        think = dict.fromkeys(threads, 0.0)
        for s in range(max(turns)):              # interleaved as they run: turn s of each
            for j, t in enumerate(threads):
                if s >= turns[j]:
                    continue
                final = s == turns[j] - 1
                out = lognormal_tokens(rng, 600, 0.5, 150, 2000) if final else \
                    lognormal_tokens(rng, 80, 0.5, 30, 250)
                last[t] = b.call(EXPLORE, pending[t], out, after=[last[t]], think_ms=think[t],
                                 thread=t, signal=b.semantic(EXPLORE, state, {
                                     "final": 1.0 if final else -1.0}))
                if not final:
                    tool = EXPLORE_TOOLS[s % 2]
                    pending[t] = [self._result(b, last[t], tool)]
                    think[t] = b.tool(tool)
        return [last[t] for t in threads]

    def _compact(self, b: WorkflowBuilder, pending: list[Segment], after: list[int], think: float,
                 state: dict) -> int:
        """The compaction call over the main thread; the main thread then restarts from its summary."""
        fork = f"{COMPACT}/{len(b.calls)}"
        b.fork(MAIN, fork)
        idx = b.call(COMPACT, pending + [(("compact-prompt",), 700)],
                     lognormal_tokens(b.rng, 3000, 0.4, 1000, 8000), after=after, think_ms=think,
                     thread=fork, signal=b.semantic(COMPACT, state))
        b.reset(fork)
        b.reset(MAIN)
        return idx

    def build(self, b: WorkflowBuilder) -> None:
        rng, wf = b.rng, b.workflow
        d, breadth = float(rng.uniform()), float(rng.uniform())
        state = {"difficulty": 2 * d - 1, "breadth": 2 * breadth - 1}
        limit = int(rng.integers(self.compact[0], self.compact[1] + 1))
        memory = (("memory", wf), lognormal_tokens(rng, 1500, 0.7, 200, 6000))
        pending: list[Segment] = [self.anchor(MAIN), memory,
                                  (("request", wf, 0), lognormal_tokens(rng, 150, 0.9, 20, 3000))]
        after: list[int] | None = None
        think = 0.0
        # one more coin only where asked for, so the default traces keep their draws
        delegates = self.explore_sessions >= 1.0 or bool(rng.uniform() < self.explore_sessions)
        last_turn = self.max_turns
        for req in range(MAX_FOLLOWUPS + 1):
            needed = (12.0 * math.exp(1.6 * d) + float(rng.poisson(3))) * self.turns_scale
            if req > 0:
                needed /= 3
            spawns = 0 if delegates else MAX_SPAWNS
            for turn in range(1, last_turn + 1):
                progress = min(1.0, turn / needed)
                done = b.event(0.8 * (turn - needed))
                answers = done.happens or turn == last_turn
                spawn = None
                if not answers and spawns < MAX_SPAWNS:
                    spawn = b.event(-4.0 + 2.4 * breadth - 2.0 * progress)
                if _tokens(b.thread(MAIN).segments) + _tokens(pending) > limit:
                    after = [self._compact(b, pending, after or [], think, state)]
                    pending = [self.anchor(MAIN), memory, b.output(after[0])]
                    think = 0.0
                fill = _tokens(b.thread(MAIN).segments) + _tokens(pending)
                tasks: list[Segment] = []
                tool = ""
                if answers:
                    out = lognormal_tokens(rng, 250, 0.6, 50, 1500)
                elif spawn is not None and spawn.happens:
                    k = 1 + int(rng.choice(3, p=(0.5, 0.35, 0.15)))
                    tasks = [(("task", wf, len(b.calls), j), lognormal_tokens(rng, 150, 0.6, 40, 600))
                             for j in range(k)]
                    out = _tokens(tasks) + 30 * k
                else:
                    names, shares = PHASE_TOOLS[0 if progress < 0.4 else 1 if progress < 0.8 else 2]
                    tool = str(rng.choice(names, p=shares))
                    out = lognormal_tokens(rng, 600, 0.5, 300, 1500) if tool == "file_edit" else \
                        lognormal_tokens(rng, 100, 0.6, 30, 300)
                idx = b.call(MAIN, pending, out, after=after, think_ms=think, signal=b.semantic(
                    MAIN, state, {"done": done.feature, "progress": 2 * progress - 1,
                                  "fill": 2 * fill / limit - 1,
                                  "spawn": spawn.feature if spawn is not None else -1.0}))
                if answers:
                    break
                if tasks:
                    spawns += 1
                    after = self._explore(b, idx, tasks, state)
                    pending, think = [b.output(i) for i in after], 0.0
                else:
                    after, pending, think = [idx], [self._result(b, idx, tool)], b.tool(tool)
            if req == MAX_FOLLOWUPS or not b.event(breadth - 1.2, spread=0.0).happens:
                break
            after = [idx]
            pending = [(("request", wf, req + 1), lognormal_tokens(rng, 80, 0.9, 10, 1500))]
            think = b.tool("human")

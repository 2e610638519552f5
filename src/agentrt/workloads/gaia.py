"""`gaia`: an orchestrator with web, file and code agents and a terminal (a CacheSage workload).

Agents and control flow follow Magentic-One (Fourney et al. 2024), the AutoGen team built for
GAIA (Mialon et al. 2023). Every message of the team is broadcast: each agent's prompt is its
system prompt followed by the whole group conversation so far, so its next call extends its last.
- orchestrator: writes the task ledger (facts, then plan: two calls on its planning thread) and
  broadcasts it; then every step it asks the progress ledger over the whole conversation (a
  transient prompt: the ledger prompt and answer never join the history, so the next step reuses
  only the conversation), broadcasts an instruction and picks the next speaker; when the ledger
  says the request is satisfied it writes the final answer.
- web_surfer, file_surfer (tool-using): one call picks a browser or file action; the action runs
  as think time and its result (page text, file as markdown) is broadcast as the agent's message.
- coder: writes code (broadcast); the computer terminal (a tool, not an LLM) is the next speaker
  with probability 0.9 (guess), runs the code as think time and broadcasts its output.
Long and branching: the speaker at each step depends on what the question needs. After 3 stalled
steps (max_stalls = 3, Magentic-One's default) the orchestrator re-plans (two transient calls),
clears the conversation and resets every agent, whose next calls start fresh prompts. At most 20
steps (max_turns = 20, MagenticOneGroupChat's default).

Hidden state: the GAIA level (1, 2, 3 with the validation split's shares 53 / 86 / 26 of 165) and
what the question needs (web, file, code; weights drawn per workflow, a file attachment in about
a quarter of the questions: guess). Steps needed ~ 3 + 3 level + Poisson(2) (guess); the
orchestrator declares success with logit 2 (step - needed) (guess), a step stalls with
probability 0.15 + 0.1 level (guess). Signals carry the level, the needs and the next choice.

Sizes: questions 40 to 300 tokens (estimate from GAIA's validation questions); ledger calls 150
to 500 tokens out; pages read by the web surfer lognormal, median 1,800 tokens, clipped 400 to
6,000 (guess: Magentic-One sends the page's visible text and accessibility tree); files read as
markdown lognormal, median 1,500, clipped 200 to 8,000 (guess); terminal output 50 to 800
tokens. System prompts with tool schemas 900 to 2,800 tokens (guess from Magentic-One's prompts).
Tool times from `workloads.tools`: the web surfer's first action after a (re)start is a
`web_search`, later ones load a page (`web_fetch`, median 5 s: HTTP Archive's median onLoad is
about 6 s); the file surfer's reads are `file_read`, the terminal's runs `code_exec`. They were
uniform 1 to 6 s, 0.2 to 2 s and 0.5 to 10 s; each draw still takes one uniform, so the
workflows' structure and statistics are unchanged.
"""

from __future__ import annotations

from agentrt.workloads.base import Workload, WorkflowBuilder, lognormal_tokens
from agentrt.workloads.hashing import Segment

LEVELS = (1, 2, 3)
LEVEL_SHARES = (53 / 165, 86 / 165, 26 / 165)
MAX_TURNS = 20
MAX_STALLS = 3
WORKERS = ("web_surfer", "file_surfer", "coder")
ORCH = "orchestrator"


class _Chat:
    """The broadcast conversation: messages with their authors, and how far each thread has read."""

    def __init__(self) -> None:
        self.log: list[tuple[Segment, str | None]] = []
        self.read: dict[str, int] = {}

    def post(self, seg: Segment, author: str | None) -> None:
        self.log.append((seg, author))

    def unread(self, b: WorkflowBuilder, agent: str, anchor: Segment) -> list[Segment]:
        """New messages for `agent` (its own LLM outputs are already in its thread)."""
        start = self.read.get(agent)
        first = start is None or agent not in b.threads
        segs = [s for s, who in self.log[0 if first else start:]
                if not (who == agent and s[0][0] == "out")]
        self.read[agent] = len(self.log)
        return ([anchor] if first else []) + segs

    def clear(self, b: WorkflowBuilder, threads: list[str]) -> None:
        self.log.clear()
        self.read.clear()
        for t in threads:
            b.reset(t)


class GaiaWorkload(Workload):
    name = "gaia"
    summary = "Magentic-One style: orchestrator ledgers, web and file surfers, coder and a terminal"
    system = {ORCH: 1600, "web_surfer": 2800, "file_surfer": 1400, "coder": 900}
    expected = {"calls_per_workflow": (10.0, 40.0), "prompt_tokens": (3000.0, 14000.0),
                "output_tokens": (60.0, 300.0), "reuse_within": (0.6, 0.97),
                "reuse_across": (0.01, 0.2)}

    def _ledger(self, b: WorkflowBuilder, chat: _Chat, prompt: Segment, out: int, after: int,
                think: float, signal: list[float]) -> int:
        """A transient orchestrator call: the conversation plus `prompt`, kept out of the history."""
        b.thread(ORCH).segments.extend(chat.unread(b, ORCH, self.anchor(ORCH)))
        fork = f"{ORCH}/transient{len(b.calls)}"
        b.fork(ORCH, fork)
        idx = b.call(ORCH, [prompt], out, after=[after], think_ms=think, signal=signal, thread=fork)
        b.reset(fork)
        return idx

    def build(self, b: WorkflowBuilder) -> None:
        rng, wf = b.rng, b.workflow
        level = int(rng.choice(LEVELS, p=LEVEL_SHARES))
        needs = rng.dirichlet([2.0, 1.0 if rng.uniform() < 0.25 else 0.2, 1.0])
        state = {"level": level - 2.0, **{f"need:{a}": float(x) for a, x in zip(WORKERS, needs)}}
        needed = 3 + 3 * level + int(rng.poisson(2))
        task = (("task", wf), int(rng.integers(40, 301)))
        chat = _Chat()

        facts = b.call(ORCH, [self.anchor(ORCH), task], int(rng.integers(150, 401)),
                       thread=f"{ORCH}/plan", signal=b.semantic(ORCH, state))
        prev = b.call(ORCH, [(("plan-prompt",), 120)], int(rng.integers(150, 501)), after=[facts],
                      thread=f"{ORCH}/plan", signal=b.semantic(ORCH, state))
        chat.post((("task-ledger", wf, prev), 300 + task[1] + b.calls[facts].output_length
                   + b.calls[prev].output_length), ORCH)
        think, stalls, speaker = 0.0, 0, None
        searched = False   # the web surfer starts from a search, then follows pages
        for step in range(1, MAX_TURNS + 1):
            done = b.event(2.0 * (step - needed) if step < MAX_TURNS else 4.0)
            if speaker == "coder" and rng.uniform() < 0.9:
                speaker = "terminal"
            else:
                speaker = str(rng.choice(WORKERS, p=needs))
            prev = self._ledger(b, chat, (("ledger-prompt",), 220), int(rng.integers(150, 301)), prev,
                                think, b.semantic(ORCH, state, {"done": done.feature, f"next:{speaker}": 1.0}))
            think = 0.0
            if done.happens:
                break
            chat.post((("instruction", wf, step), int(rng.integers(40, 121))), ORCH)
            if speaker == "terminal":
                chat.post((("terminal", wf, step), int(rng.integers(50, 801))), None)
                think = b.tool("code_exec")
            else:
                new = chat.unread(b, speaker, self.anchor(speaker))
                sig = b.semantic(speaker, state)
                if speaker == "coder":
                    prev = b.call(speaker, new, int(rng.integers(150, 601)), after=[prev], signal=sig)
                    chat.post(b.output(prev), speaker)
                else:
                    prev = b.call(speaker, new, int(rng.integers(40, 121)), after=[prev], signal=sig)
                    if speaker == "web_surfer":
                        page = lognormal_tokens(rng, 1800, 0.6, 400, 6000)
                        think = b.tool("web_fetch" if searched else "web_search")
                        searched = True
                    else:
                        page = lognormal_tokens(rng, 1500, 0.8, 200, 8000)
                        think = b.tool("file_read")
                    chat.post((("page", wf, prev), page), speaker)
            stalls = stalls + 1 if rng.uniform() < 0.15 + 0.1 * level else 0
            if stalls >= MAX_STALLS:
                stalls = 0
                sig = b.semantic(ORCH, state, {"replan": 1.0})
                facts = self._ledger(b, chat, (("update-facts-prompt",), 150), int(rng.integers(150, 401)),
                                     prev, think, sig)
                prev = self._ledger(b, chat, (("update-plan-prompt",), 150), int(rng.integers(150, 501)),
                                    facts, 0.0, sig)
                think = 0.0
                chat.clear(b, [ORCH, *WORKERS])
                searched = False
                chat.post((("task-ledger", wf, prev), 300 + task[1] + b.calls[facts].output_length
                           + b.calls[prev].output_length), ORCH)
        self._ledger(b, chat, (("final-prompt",), 90), int(rng.integers(60, 250)), prev, think,
                     b.semantic(ORCH, state, {"done": 1.0}))

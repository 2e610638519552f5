"""`mtbench`: two-turn conversations through a writer and a critic (a CacheSage workload).

Agents and control flow: MT-Bench (Zheng et al. 2023) has 80 two-turn questions, 10 in each of 8
categories. Each workflow is one such conversation served by a writer/critic pair (the
draft-critique-revise pattern of Self-Refine, Madaan et al. 2023, with two agents):
turn 1: writer answers -> critic reviews -> if the critic asks for changes, the writer revises
(at most twice, each revision reviewed again); then the user's follow-up question arrives after a
think time, and turn 2 runs the same loop. Both agents keep their threads over both turns, so
turn 2 extends turn 1's prompts.

Hidden state: the category and the answer quality q in [0, 1] (guess: uniform). The critic asks
for a revision with logit 2 (0.45 - q) - 1.2 per earlier revision in the turn (guess). Signals
carry the category, q and the critic's coming decision. Each workflow is a fresh question: a
serving deployment does not see the same 80 questions over and over, so nothing but the anchors
is shared across workflows.

Sizes: first-turn questions 30 to 250 tokens, follow-ups 20 to 120 (estimate from MT-Bench's
questions, with extraction items carrying a passage); answers by category (writing, roleplay,
humanities, STEM 250 to 700; reasoning, math 120 to 400; coding 200 to 600; extraction 100 to 350;
guesses from MT-Bench reference answers); critiques 80 to 250 tokens. System prompts 300 to 700
tokens (guess). User think time before turn 2: the `human` latency of `workloads.tools` (median
25 s, one in seven answers after minutes; guess, and 0 in an offline evaluation; it was uniform 2
to 20 s). One uniform per draw as before: structure and statistics unchanged.
"""

from __future__ import annotations

from agentrt.workloads.base import Workload, WorkflowBuilder

CATEGORIES = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities")
ANSWER = {"writing": (250, 700), "roleplay": (250, 700), "humanities": (250, 700),
          "stem": (250, 700), "reasoning": (120, 400), "math": (120, 400),
          "coding": (200, 600), "extraction": (100, 350)}
MAX_REVISIONS = 2


class MtbenchWorkload(Workload):
    name = "mtbench"
    summary = "two-turn conversations: writer drafts, critic reviews, writer revises"
    system = {"writer": 650, "critic": 380}
    expected = {"calls_per_workflow": (4.0, 10.0), "prompt_tokens": (800.0, 3000.0),
                "output_tokens": (150.0, 450.0), "reuse_within": (0.45, 0.9),
                "reuse_across": (0.05, 0.45)}

    def build(self, b: WorkflowBuilder) -> None:
        rng, wf = b.rng, b.workflow
        cat = str(rng.choice(CATEGORIES))
        quality = float(rng.uniform())
        state = {f"cat:{cat}": 1.0, "quality": 2 * quality - 1}
        lo, hi = ANSWER[cat]
        prev: int | None = None
        for turn in (1, 2):
            q = (("question", wf, turn), int(rng.integers(30, 251) if turn == 1 else rng.integers(20, 121)))
            think = 0.0 if turn == 1 else b.tool("human")
            w_new = ([self.anchor("writer")] if turn == 1 else []) + [q]
            after = None if prev is None else [prev]
            draft = b.call("writer", w_new, int(rng.integers(lo, hi + 1)), after=after, think_ms=think,
                           signal=b.semantic("writer", state, {"turn": turn - 1.5}))
            c_new = ([self.anchor("critic")] if turn == 1 else []) + [q, b.output(draft)]
            for rev in range(MAX_REVISIONS + 1):
                ask = b.event(2.0 * (0.45 - quality) - 1.2 * rev if rev < MAX_REVISIONS else -4.0)
                crit = b.call("critic", c_new, int(rng.integers(80, 251)), after=[draft],
                              signal=b.semantic("critic", state, {"revise": ask.feature}))
                prev = crit
                if not ask.happens:
                    break
                draft = b.call("writer", [b.output(crit)], int(rng.integers(lo, hi + 1)), after=[crit],
                               signal=b.semantic("writer", state, {"turn": turn - 1.5}))
                c_new = [b.output(draft)]

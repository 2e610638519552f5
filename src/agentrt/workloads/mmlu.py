"""`mmlu`: multi-agent debate on MMLU questions (a CacheSage workload).

Agents and control flow (multi-agent debate, Du et al. 2023: three agents, answers exchanged
over rounds; the personas are the role-play of ChatDev/MetaGPT-style teams):
- moderator: poses the question, and after every round reads the three answers and decides
  whether they agree (stop) or another round is needed; its last call gives the final answer.
- three debaters (`scholar`, `skeptic`, `pragmatist`): in every round they answer in parallel
  (fan-out after the moderator's call; the moderator's check is the fan-in); from round 2 on
  each reads the other two answers of the previous round and revises, extending its own thread.
At most 3 rounds (Du et al. found 2 to 4 enough; 3 is a guess that bounds the trace).

Hidden state: the subject (one of MMLU's 57, Hendrycks et al. 2021) and a difficulty in [0, 1]
(guess: uniform). Consensus logit after round r: 2.5 (0.6 - difficulty) + 1.0 (r - 1) (guess:
easy questions agree at once, hard ones keep debating). Signals carry difficulty and the
moderator's coming decision.

Sizes: questions with their four options lognormal, median 90 tokens, clipped 30 to 700 (estimate:
most MMLU items are short, professional law items run to several hundred tokens); answers with
reasoning 120 to 400 tokens; the debate instruction 60 tokens; moderator verdicts 30 to 90 tokens
(guesses). System prompts (personas) 350 to 600 tokens (guess from ChatDev role prompts). No
tools: no think time.
"""

from __future__ import annotations

from agentrt.workloads.base import Workload, WorkflowBuilder, lognormal_tokens

DEBATERS = ("scholar", "skeptic", "pragmatist")
SUBJECTS = 57
MAX_ROUNDS = 3


class MmluWorkload(Workload):
    name = "mmlu"
    summary = "multi-agent debate: moderator and three role-play debaters over 1-3 rounds"
    system = {"moderator": 450, "scholar": 520, "skeptic": 480, "pragmatist": 400}
    expected = {"calls_per_workflow": (5.0, 13.0), "prompt_tokens": (900.0, 3000.0),
                "output_tokens": (100.0, 300.0), "reuse_within": (0.3, 0.8),
                "reuse_across": (0.1, 0.5)}

    def build(self, b: WorkflowBuilder) -> None:
        rng, wf = b.rng, b.workflow
        subject = int(rng.integers(SUBJECTS))
        difficulty = float(rng.uniform())
        state = {"difficulty": 2 * difficulty - 1, "subject": subject / (SUBJECTS - 1) * 2 - 1}
        question = (("question", wf), lognormal_tokens(rng, 90, 0.6, 30, 700))

        mod = b.call("moderator", [self.anchor("moderator"), question], int(rng.integers(20, 50)),
                     signal=b.semantic("moderator", state))
        prev_round: list[int] = []
        for r in range(1, MAX_ROUNDS + 1):
            calls = []
            for name in DEBATERS:
                if r == 1:
                    new = [self.anchor(name), question, b.output(mod)]
                else:
                    others = [b.output(c) for c in prev_round if b.calls[c].agent != name]
                    new = others + [(("debate-instruction",), 60)]
                calls.append(b.call(name, new, int(rng.integers(120, 401)), after=[mod],
                                    signal=b.semantic(name, state, {"round": r - 2.0})))
            agree = b.event(2.5 * (0.6 - difficulty) + 1.0 * (r - 1) if r < MAX_ROUNDS else 4.0)
            stops = r == MAX_ROUNDS or agree.happens
            mod = b.call("moderator", [b.output(c) for c in calls],
                   int(rng.integers(30, 91)) + (40 if stops else 0), after=calls,
                   signal=b.semantic("moderator", state, {"stop": agree.feature}))
            prev_round = calls
            if stops:
                break

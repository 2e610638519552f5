"""`gsm8k`: a solver and a verifier in a self-refine loop (a CacheSage workload).

Agents and control flow (Self-Refine, Madaan et al. 2023, with the feedback given by a second
agent as in multi-agent verification setups):
- solver: solves the problem step by step (its system prompt carries the 8-shot chain-of-thought
  exemplars of Wei et al. 2022, the standard GSM8K prompt, so it is long and shared by every
  workflow); on feedback it writes a refined solution, extending its thread.
- verifier: checks the solution and either accepts it (stop) or explains the error.
At most 3 refinements (Self-Refine stops after at most 4 iterations). No tools.

Hidden state: the number of reasoning steps n in {2, ..., 8} (GSM8K problems "take between 2 and
8 steps to solve", Cobbe et al. 2021; uniform is a guess). The verifier rejects with logit
0.5 (n - 2) - 1.8 - 1.0 per earlier refinement (guess: 30 % to 70 % of first solutions rejected,
fewer after each refinement). Signals carry n and the verifier's coming decision.

Sizes: solver system prompt with exemplars 1,000 tokens (estimate: the 8 exemplars run to about
3,800 characters plus instructions), verifier 550 (guess); questions lognormal, median 65 tokens,
clipped 25 to 250 (estimate: GSM8K problems average about 46 words); solutions 30 + 25 n to
60 + 40 n tokens, feedback 40 to 200 tokens (guesses).
"""

from __future__ import annotations

from agentrt.workloads.base import Workload, WorkflowBuilder, lognormal_tokens

MAX_REFINEMENTS = 3


class Gsm8kWorkload(Workload):
    name = "gsm8k"
    summary = "math word problems: solver and verifier in a self-refine loop"
    system = {"solver": 1000, "verifier": 550}
    expected = {"calls_per_workflow": (2.5, 5.5), "prompt_tokens": (700.0, 1600.0),
                "output_tokens": (60.0, 250.0), "reuse_within": (0.2, 0.6),
                "reuse_across": (0.25, 0.7)}

    def build(self, b: WorkflowBuilder) -> None:
        rng, wf = b.rng, b.workflow
        n = int(rng.integers(2, 9))
        state = {"steps": (n - 5) / 3}
        question = (("question", wf), lognormal_tokens(rng, 65, 0.4, 25, 250))
        sol = b.call("solver", [self.anchor("solver"), question], int(rng.integers(30 + 25 * n, 61 + 40 * n)),
                     signal=b.semantic("solver", state))
        v_new = [self.anchor("verifier"), question, b.output(sol)]
        for r in range(MAX_REFINEMENTS + 1):
            reject = b.event(0.5 * (n - 2) - 1.8 - 1.0 * r if r < MAX_REFINEMENTS else -4.0)
            ver = b.call("verifier", v_new, int(rng.integers(40, 201)) if reject.happens else int(rng.integers(10, 40)),
                         after=[sol], signal=b.semantic("verifier", state, {"reject": reject.feature}))
            if not reject.happens:
                break
            sol = b.call("solver", [b.output(ver)], int(rng.integers(30 + 25 * n, 61 + 40 * n)), after=[ver],
                         signal=b.semantic("solver", state, {"refine": r + 1.0}))
            v_new = [b.output(sol)]

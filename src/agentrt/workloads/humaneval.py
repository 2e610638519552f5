"""`humaneval`: programmer, test designer and executor with retries (a CacheSage workload).

Agents and control flow (AgentCoder, Huang et al. 2023: programmer, test designer, test
executor, at most 5 iterations):
- programmer and test_designer start in parallel from the problem (fan-out): one writes the
  function with its reasoning, the other basic, edge and large-scale tests.
- executor: waits for both (fan-in); the code runs against the tests as a tool (think time), and
  the executor reads the log and writes the feedback. In AgentCoder the executor is a script; here
  it is an LLM agent that reads the log, as teams that let a model triage test failures do.
- on failure the programmer revises (extending its thread with the feedback); when the tests
  themselves were wrong the test designer revises them too (in parallel).
At most 5 iterations (AgentCoder's setting).

Hidden state: difficulty d and ambiguity a of the docstring, both uniform in [0, 1] (guess). The
tests fail with logit 3.5 (d - 0.55) - 0.9 per earlier iteration (guess: most problems pass
first time, as the high pass@1 of strong models on HumanEval suggests); a failure is blamed on
the tests with logit 4 (a - 0.8) (guess: about a quarter of failures). Signals carry d, a and
the coming outcome.

Sizes: problems (signature and docstring) lognormal, median 130 tokens, clipped 40 to 600
(estimate: HumanEval's 164 prompts average about 450 characters); programmer outputs 120 to 500
tokens, tests 200 to 600, feedback 40 to 250, execution logs 50 to 600 tokens (guesses). System
prompts 500 to 900 tokens (guess from AgentCoder's prompts with their one-shot example).
Execution: `code_exec` from `workloads.tools` (median 1.5 s, guess: a Python process running
the tests; it was uniform 0.3 to 5 s). One uniform per draw as before: structure and statistics
unchanged.
"""

from __future__ import annotations

from agentrt.workloads.base import Workload, WorkflowBuilder, lognormal_tokens

MAX_ITERATIONS = 5


class HumanevalWorkload(Workload):
    name = "humaneval"
    summary = "code generation: programmer and test designer in parallel, executor, retries"
    system = {"programmer": 900, "test_designer": 800, "executor": 500}
    expected = {"calls_per_workflow": (3.0, 8.0), "prompt_tokens": (700.0, 2500.0),
                "output_tokens": (100.0, 400.0), "reuse_within": (0.1, 0.6),
                "reuse_across": (0.2, 0.8)}

    def build(self, b: WorkflowBuilder) -> None:
        rng, wf = b.rng, b.workflow
        d, amb = float(rng.uniform()), float(rng.uniform())
        state = {"difficulty": 2 * d - 1, "ambiguity": 2 * amb - 1}
        problem = (("problem", wf), lognormal_tokens(rng, 130, 0.5, 40, 600))
        first = {"revision": -1.0}
        code = b.call("programmer", [self.anchor("programmer"), problem], int(rng.integers(120, 501)),
                      signal=b.semantic("programmer", state, first))
        tests = b.call("test_designer", [self.anchor("test_designer"), problem], int(rng.integers(200, 601)),
                       after=[], signal=b.semantic("test_designer", state, first))
        ex_new = [self.anchor("executor"), problem, b.output(code), b.output(tests)]
        for it in range(MAX_ITERATIONS):
            fail = b.event(3.5 * (d - 0.55) - 0.9 * it if it < MAX_ITERATIONS - 1 else -4.0)
            bad_tests = b.event(4.0 * (amb - 0.8))
            log = (("exec-log", wf, it), int(rng.integers(50, 601)))
            report = b.call("executor", ex_new + [log], int(rng.integers(40, 251)), after=[code, tests],
                            think_ms=b.tool("code_exec"),
                            signal=b.semantic("executor", state, {"fail": fail.feature,
                                                                  "bad_tests": bad_tests.feature}))
            if not fail.happens:
                break
            ex_new = []
            if bad_tests.happens:
                tests = b.call("test_designer", [b.output(report)], int(rng.integers(200, 601)),
                               after=[report], signal=b.semantic("test_designer", state, {"revision": 1.0}))
                ex_new.append(b.output(tests))
            code = b.call("programmer", [b.output(report)], int(rng.integers(120, 501)), after=[report],
                          signal=b.semantic("programmer", state, {"revision": 1.0}))
            ex_new.insert(0, b.output(code))

"""`swebench`: repository-level code repair with retry loops (a PBKV workload).

Agents and control flow (the plan/locate/edit/test split of SWE-agent, Yang et al. 2024, and
Agentless, Xia et al. 2024, run as a team as MetaGPT-style frameworks do):
- planner: reads the issue, writes a plan; at the end reads the outcome and writes a summary.
- locator (tool-using): 2 to 8 repository tool calls (find_file, search_dir, open); each call
  emits a command, the tool runs as think time, the next call reads its output; the last call
  names the locations to edit.
- coder: reads issue, plan, locations and the retrieved repository context (10k to 30k tokens)
  and writes a patch.
- tester: writes the test command, the test suite runs as think time, the next call reads the log
  and reports pass or fail.
On failure the report goes back to the coder (a new patch: its thread, with the whole repository
context, is extended) or, when the location was wrong, to the locator (more tool calls, then the
coder receives the new locations and more context). At most 4 attempts (guess: agent budgets).

Hidden state: difficulty d in [0, 1] (fail logit 3 (d - 0.45) - 0.6 attempt, guess: about half
of the tasks need a retry) and localisability l in [0, 1] (a failure is blamed on the location with logit
1.2 (1 - l) - 1, i.e. 27 % to 55 % of failures; guess). Signals carry d, l and the outcome each call leads to.

Sizes: issue texts lognormal, median 250 tokens, clipped 60 to 2,500 (SWE-bench, Jimenez et al.
2024, Table 1: 195 words on average); repository context 10k to 30k tokens (the paper's BM25
retrieval settings: 13k and 27k token budgets); tool outputs lognormal, median 600 tokens,
clipped 100 to 3,000 (guess: a search listing or a 100-line file window); patches 150 to 900
tokens (gold patches edit 32.8 lines on average, Table 1); test logs 300 to 3,000 tokens (guess).
System prompts with tool documentation 1,600 to 3,200 tokens (SWE-agent's prompt with its command
docs is of that order; guess). Tool times from `workloads.tools`: the locator's commands alternate
`search` (find_file, search_dir) and `file_read` (open), the test suite is `test_run` (median
20 s, clipped 1 to 600 s; it was 12 s, clipped at 90 s, before the tools module). A tool draw
takes one uniform; the lognormal draw it replaced now and then took two (numpy's normal sampler),
and did in the first workflow at seed 0, so the workflows differ from before the tools module
(same model; the documented ranges did not move).
"""

from __future__ import annotations

from agentrt.workloads.base import Workload, WorkflowBuilder, lognormal_tokens

MAX_ATTEMPTS = 4


class SwebenchWorkload(Workload):
    name = "swebench"
    summary = "code repair: planner, locator with repo tools, coder over 10-30k context, tester with retries"
    system = {"planner": 1800, "locator": 3200, "coder": 2400, "tester": 1600}
    expected = {"calls_per_workflow": (10.0, 24.0), "prompt_tokens": (6000.0, 16000.0),
                "output_tokens": (80.0, 300.0), "reuse_within": (0.6, 0.95),
                "reuse_across": (0.01, 0.2)}

    def _locate(self, b: WorkflowBuilder, new: list, steps: int, prev: int, state: dict) -> int:
        rng, wf = b.rng, b.workflow
        think = 0.0
        for s in range(steps):
            cmd = b.call("locator", new, int(rng.integers(30, 81)), after=[prev], think_ms=think,
                         signal=b.semantic("locator", state, {"search": 1.0 - s / steps}))
            new = [(("tool", wf, cmd), lognormal_tokens(rng, 600, 0.6, 100, 3000))]
            prev = cmd
            think = b.tool("search" if s % 2 == 0 else "file_read")
        return b.call("locator", new, int(rng.integers(80, 251)), after=[prev], think_ms=think,
                      signal=b.semantic("locator", state, {"search": 0.0}))

    def build(self, b: WorkflowBuilder) -> None:
        rng, wf = b.rng, b.workflow
        d, loc = float(rng.uniform()), float(rng.uniform())
        state = {"difficulty": 2 * d - 1, "localisability": 2 * loc - 1}
        issue = (("issue", wf), lognormal_tokens(rng, 250, 0.7, 60, 2500))

        plan = b.call("planner", [self.anchor("planner"), issue], int(rng.integers(150, 451)),
                      signal=b.semantic("planner", state))
        steps = min(8, 2 + int(rng.poisson(1 + 3 * d)))
        where = self._locate(b, [self.anchor("locator"), issue, b.output(plan)], steps, plan, state)
        context = (("repo", wf, 0), int(rng.integers(10_000, 30_001)))
        coder_new = [self.anchor("coder"), issue, b.output(plan), b.output(where), context]
        coder_after = where
        report = where
        for attempt in range(MAX_ATTEMPTS):
            fail = b.event(3.0 * (d - 0.45) - 0.6 * attempt)
            fails = fail.happens and attempt < MAX_ATTEMPTS - 1
            patch = b.call("coder", coder_new, int(rng.integers(150, 901)), after=[coder_after],
                           signal=b.semantic("coder", state, {"fail": fail.feature}))
            tester_new = [b.output(patch)]
            if attempt == 0:
                tester_new = [self.anchor("tester"), issue] + tester_new
            cmd = b.call("tester", tester_new, int(rng.integers(60, 301)), after=[patch],
                         signal=b.semantic("tester", state, {"fail": fail.feature}))
            log = (("test-log", wf, attempt), int(rng.integers(300, 3001)))
            run_ms = b.tool("test_run")
            relocate = b.event(1.2 * (1 - loc) - 1.0) if fails else None
            report = b.call("tester", [log], int(rng.integers(60, 201)), after=[cmd], think_ms=run_ms,
                            signal=b.semantic("tester", state, {
                                "fail": fail.feature,
                                "relocate": relocate.feature if relocate else -1.0}))
            if not fails:
                break
            if relocate is not None and relocate.happens:
                more = 1 + int(rng.integers(0, 3))
                where = self._locate(b, [b.output(report)], more, report, state)
                extra = (("repo", wf, attempt + 1), int(rng.integers(3000, 10_001)))
                coder_new = [b.output(report), b.output(where), extra]
                coder_after = where
            else:
                coder_new = [b.output(report)]
                coder_after = report
        b.call("planner", [b.output(report)], int(rng.integers(100, 301)), after=[report],
               signal=b.semantic("planner", state, {"done": 1.0}))

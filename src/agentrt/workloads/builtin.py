"""`team`: a small built-in planner / coder / tester workflow (the default run replays `mix`).

Agents and control flow: the planner reads the task and writes a plan; the coder writes code
after the plan; the tester runs the tests as a tool (think time) and reports; on failure (a
hidden per-workflow difficulty decides how often) the coder is called again, at most three
times; the planner closes the workflow with a summary. Every agent keeps its own thread, so the
coder's and planner's second calls extend their first prompts.

Sizes (guesses in the range of public agent-framework prompts, not measurements): system prompts
with tool definitions of 1.5k to 3k tokens, tasks of 300 to 1,200 tokens, outputs of 100 to 600
tokens, test runs of 2 to 20 seconds.
"""

from __future__ import annotations

from agentrt.workloads.base import Workload, WorkflowBuilder

SYSTEM = {"planner": 2048, "coder": 2816, "tester": 1536}


class TeamWorkload(Workload):
    name = "team"
    summary = "planner, coder and tester with a retry loop (the smallest built-in team)"

    def build(self, b: WorkflowBuilder) -> None:
        rng = b.rng
        wf = b.workflow
        difficulty = float(rng.uniform())
        task = (("task", wf), int(rng.integers(300, 1200)))
        plan = b.call("planner", [(("sys", "planner"), SYSTEM["planner"]), task],
                      int(rng.integers(200, 500)))
        plan_out = (("out", wf, plan), b.calls[plan].output_length)
        prev = plan
        for attempt in range(3):
            if attempt == 0:
                coder_new = [(("sys", "coder"), SYSTEM["coder"]), task, plan_out]
            else:
                coder_new = [(("feedback", wf, attempt), b.calls[prev].output_length)]
            code = b.call("coder", coder_new, int(rng.integers(300, 600)), after=[prev])
            code_out = (("out", wf, code), b.calls[code].output_length)
            results = (("test-run", wf, attempt), int(rng.integers(200, 800)))
            tester_new = [code_out, results]
            if attempt == 0:
                tester_new = [(("sys", "tester"), SYSTEM["tester"]), task] + tester_new
            prev = b.call("tester", tester_new, int(rng.integers(100, 300)), after=[code],
                          think_ms=float(rng.uniform(2000, 20000)))
            if rng.uniform() > difficulty:
                break
        b.call("planner", [(("report", wf), b.calls[prev].output_length)],
               int(rng.integers(100, 300)), after=[prev])

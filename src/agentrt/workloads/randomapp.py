"""`random`: a multi-agent application drawn at random, to judge policies on shapes no generator
here was written for.

The trace's seed first draws one application (`draw_app`; the same seed gives the same
application and workflows), then every workflow runs it:
- agents: 2 to 7, each with a system prompt of lognormal size (median 1,000 tokens, clipped 150
  to 6,000), its own output size range (median 40 to 600 tokens), and with probability 0.6 a
  tool from `workloads.tools` whose result (lognormal, median 100 to 3,000 tokens) joins the
  caller's thread after the tool's latency;
- who sees what: broadcast (every message joins every agent's thread, as in AutoGen's group chat
  or Magentic-One) or direct (a message joins only the next speaker's thread, as in pipelines and
  hand-offs), one coin per application;
- control flow: a first agent, then a Markov chain over agents whose rows are Dirichlet(alpha),
  alpha log-uniform in [0.1, 3] (near-deterministic pipelines to uniform chatter); the workflow
  needs 1 to 12 steps plus Poisson(2) (its hidden difficulty) and ends with logit 1.5 (step -
  needed); at most 40 steps;
- fan-out: with probability 0.3 one agent delegates: each time it speaks it starts 2 to 4
  parallel instances of another agent (each its own thread, forked from that agent's history),
  whose answers all join the delegator's thread;
- compaction: a thread over the application's context limit (lognormal, median 24,000 tokens,
  clipped 4,000 to 120,000) is reset to its system prompt, the task and a summary (200 to 1,500
  tokens).
Each workflow's task is 50 to 4,000 tokens (lognormal, median drawn per application). A call's
signal carries the agent, the difficulty, how close the workflow is to its end and the next
speaker, with the generators' usual noise. Nothing here is measured: the ranges are chosen to
span the built-in workloads and beyond, not to fit any of them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from agentrt.workloads.base import GenConfig, Workload, WorkflowBuilder, lognormal_tokens
from agentrt.workloads.hashing import Segment
from agentrt.workloads.tools import TOOLS

MAX_STEPS = 40


@dataclass(frozen=True, slots=True)
class AgentShape:
    name: str
    system: int                       # system prompt and tool definitions, tokens
    out_median: int
    tool: str | None                  # a `workloads.tools` name, or None
    tool_tokens: int                  # median size of the tool's result


@dataclass(frozen=True, slots=True)
class AppShape:
    agents: tuple[AgentShape, ...]
    first: int
    transitions: tuple[tuple[float, ...], ...]
    broadcast: bool
    steps_base: int
    task_median: int
    delegator: int                    # -1: no fan-out
    worker: int
    max_context: int

    def describe(self) -> str:
        fan = (f", {self.agents[self.delegator].name} fans out to {self.agents[self.worker].name}"
               if self.delegator >= 0 else "")
        return (f"{len(self.agents)} agents, {'broadcast' if self.broadcast else 'direct'} messages"
                f"{fan}, context limit {self.max_context:,}")


@lru_cache(maxsize=64)
def draw_app(seed: int) -> AppShape:
    """The application of trace seed `seed` (its own stream: the workflows' draws don't move it)."""
    rng = np.random.default_rng([seed, 0x5EED])
    n = int(rng.integers(2, 8))
    tools = sorted(TOOLS)
    agents = []
    for i in range(n):
        tool = str(rng.choice(tools)) if rng.uniform() < 0.6 else None
        agents.append(AgentShape(
            name=f"agent{i}", system=lognormal_tokens(rng, 1000, 0.8, 150, 6000),
            out_median=int(math.exp(rng.uniform(math.log(40), math.log(600)))), tool=tool,
            tool_tokens=int(math.exp(rng.uniform(math.log(100), math.log(3000))))))
    alpha = math.exp(rng.uniform(math.log(0.1), math.log(3.0)))
    rows = tuple(tuple(float(x) for x in rng.dirichlet([alpha] * n)) for _ in range(n))
    delegator = worker = -1
    if n >= 2 and rng.uniform() < 0.3:
        delegator, worker = (int(x) for x in rng.choice(n, size=2, replace=False))
    return AppShape(agents=tuple(agents), first=int(rng.integers(0, n)), transitions=rows,
                    broadcast=bool(rng.uniform() < 0.5), steps_base=int(rng.integers(1, 13)),
                    task_median=int(math.exp(rng.uniform(math.log(50), math.log(4000)))),
                    delegator=delegator, worker=worker,
                    max_context=lognormal_tokens(rng, 24_000, 0.7, 4_000, 120_000))


class RandomAppWorkload(Workload):
    name = "random"
    summary = "a multi-agent application drawn from the seed: agents, tools, routing, fan-out, compaction"
    expected = {}                     # no documented ranges: every seed is another application

    def header(self, cfg: GenConfig):
        h = super().header(cfg)
        h.description = f"{self.summary}; seed {cfg.seed}: {draw_app(cfg.seed).describe()}"
        return h

    @staticmethod
    def _anchor(app: AppShape, i: int, seed: int) -> Segment:
        return (("sys", "random", seed, i), app.agents[i].system)

    def build(self, b: WorkflowBuilder) -> None:
        rng, wf, seed = b.rng, b.workflow, b.cfg.seed
        app = draw_app(seed)
        n = len(app.agents)
        needed = app.steps_base + int(rng.poisson(2))
        state = {"difficulty": (needed - 6.0) / 4.0}
        task: Segment = (("task", wf), lognormal_tokens(rng, app.task_median, 0.6, 50, 4000))
        sizes = [0] * n                                # tokens in each agent's thread
        inbox: list[list[Segment]] = [[] for _ in range(n)]
        speaker, prev, think = app.first, [], 0.0
        for step in range(MAX_STEPS):
            done = b.event(1.5 * (step - needed))
            nxt = int(rng.choice(n, p=app.transitions[speaker]))
            a = app.agents[speaker]
            new, inbox[speaker] = inbox[speaker], []
            if a.name not in b.threads or sizes[speaker] > app.max_context:
                # first call, or compaction: a fresh prompt (a summary stands for the history)
                head = [self._anchor(app, speaker, seed), task]
                if a.name in b.threads:
                    b.reset(a.name)
                    head.append((("summary", wf, step), int(rng.integers(200, 1501))))
                new = head + new
                sizes[speaker] = 0
            sig = b.semantic(a.name, state, {"done": done.feature, f"next:{nxt}": 1.0})
            out = lognormal_tokens(rng, a.out_median, 0.5, 1, 4 * a.out_median)
            idx = b.call(a.name, new, out, after=prev or None, think_ms=think, signal=sig)
            sizes[speaker] += sum(s[1] for s in new) + out
            prev, think = [idx], 0.0
            if done.happens or step == MAX_STEPS - 1:
                break
            own = b.output(idx)
            posted: list[Segment] = [own]
            if speaker == app.delegator:
                prev = self._fan_out(b, app, idx, task, posted, step)
            if a.tool is not None:
                result: Segment = (("tool", wf, idx), lognormal_tokens(rng, a.tool_tokens, 0.8, 10, 20_000))
                posted.append(result)
                think = b.tool(a.tool)
            for j in range(n):
                if app.broadcast or j == nxt or j == speaker:
                    inbox[j].extend(s for s in posted if not (j == speaker and s == own))
            speaker = nxt

    def _fan_out(self, b: WorkflowBuilder, app: AppShape, idx: int, task: Segment,
                 posted: list[Segment], step: int) -> list[int]:
        """2-4 parallel instances of the worker, each from the worker's history plus the brief."""
        rng, w = b.rng, app.agents[app.worker]
        brief = b.output(idx)
        ends = []
        for k in range(int(rng.integers(2, 5))):
            inst = f"{w.name}/sub{step}.{k}"
            if w.name in b.threads:
                b.fork(w.name, inst)
                new = [brief]
            else:
                new = [self._anchor(app, app.worker, b.cfg.seed), task, brief]
            out = lognormal_tokens(rng, w.out_median, 0.5, 1, 4 * w.out_median)
            ends.append(b.call(w.name, new, out, after=[idx], thread=inst,
                               signal=b.semantic(w.name, {}, {"sub": 1.0})))
            b.reset(inst)
            posted.append(b.output(ends[-1]))
        return ends

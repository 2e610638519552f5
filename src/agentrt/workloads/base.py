"""The frame every workload generator fills in: seeded workflows of agent calls, written as a trace.

A generator describes one workflow at a time through a `WorkflowBuilder`: which agent calls, with
which prompt segments, after which calls, after how much tool or think time, producing how many
tokens. The builder turns segments into chained hash ids (`BlockHasher`), so prompt sharing in the
trace is exactly the content sharing the generator describes. Prompts are built the way agent
frameworks build them: the agent's system prompt and tool definitions first (its anchor, shared
by every workflow), then the task, then the history that agent sees; an agent called again
extends its earlier prompt and output (`AgentThread`).

Tool time: a call that reads a tool's result is issued `think_ms` after its predecessor; the
generators draw it from the named distributions of `workloads.tools` (`WorkflowBuilder.tool`), and
`GenConfig.tool_scale` multiplies every think time where the builder records it.

Arrivals: Poisson at `rate` workflows per second, or closed loop with `concurrency` workflows at
once (written to the header; all timestamps 0). Everything is deterministic given `seed`.

Hidden state and signals: a generator draws a hidden per-workflow state (difficulty, claim type)
that steers its control flow. Every decision is a latent logit `z` (state plus the call's own
content noise) turned into an outcome by a coin of probability sigmoid(z) (`WorkflowBuilder.event`).
A call's `signal` (`WorkflowBuilder.semantic`) is the sum of fixed directions (one per agent, per
state feature, per content feature such as tanh(z/2) of the decision the call leads to) plus
Gaussian noise of standard deviation `GenConfig.noise`: a predictor that reads it learns more
than the agent path tells, never everything (the coin stays a coin even at noise 0).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Hashable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import ClassVar

import numpy as np

from agentrt.trace.limits import MAX_CONCURRENCY
from agentrt.trace.schema import Call, TraceHeader
from agentrt.workloads.hashing import BlockHasher, Segment
from agentrt.workloads.tools import tool_ms


@dataclass(slots=True)
class GenConfig:
    workflows: int = 100
    rate: float | None = None          # workflows per second (Poisson arrivals)
    concurrency: int | None = None     # closed loop: this many workflows at once
    seed: int = 0
    block_size: int = 16
    noise: float = 0.3                 # noise of the per-call `signal` around the hidden state
    tenant: str = "default"
    signal_dim: int = 8
    tool_scale: float = 1.0            # multiplies every tool and think time (`think_ms`) drawn

    def __post_init__(self) -> None:
        if self.workflows <= 0:
            raise ValueError(f"workflows must be > 0, got {self.workflows}")
        if self.seed < 0:
            raise ValueError(f"seed must be >= 0, got {self.seed}")
        if self.rate is not None and self.rate <= 0:
            raise ValueError(f"rate must be > 0, got {self.rate}")
        if self.concurrency is not None and not 0 < self.concurrency <= MAX_CONCURRENCY:
            raise ValueError(f"concurrency must be in 1..{MAX_CONCURRENCY:,}, got {self.concurrency}")
        if self.rate is None and self.concurrency is None:
            self.concurrency = 16
        if not 0.0 <= self.noise <= 10.0:
            raise ValueError(f"noise must be in [0, 10], got {self.noise}")
        if not (self.tool_scale > 0 and math.isfinite(self.tool_scale)):
            raise ValueError(f"tool_scale must be > 0, got {self.tool_scale}")


def scale_note(cfg: GenConfig) -> str:
    """What a trace's header description says about a non-default `tool_scale`."""
    return "" if cfg.tool_scale == 1.0 else f" (tool and think times x{cfg.tool_scale:g})"


@lru_cache(maxsize=4096)
def direction(key: str, dim: int) -> np.ndarray:
    """A fixed unit vector for `key` (stable across processes: derived from SHA-256, not hash())."""
    seed = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little")
    v = np.random.default_rng(seed).normal(size=dim)
    v /= np.linalg.norm(v)
    v.setflags(write=False)   # shared by the cache
    return v


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


def lognormal_tokens(rng: np.random.Generator, median: float, sigma: float, lo: int, hi: int) -> int:
    """A long-tailed size (documents, tool outputs, issue texts), clipped to [lo, hi]."""
    return int(min(hi, max(lo, round(float(rng.lognormal(math.log(median), sigma))))))


@dataclass(slots=True)
class Event:
    """A stochastic decision: `happens` with probability sigmoid(logit); `feature` = tanh(logit / 2)."""
    logit: float
    happens: bool

    @property
    def feature(self) -> float:
        return math.tanh(self.logit / 2.0)


@dataclass(slots=True)
class AgentThread:
    """What one agent has seen in one workflow: its prompt segments so far, outputs included."""
    segments: list[Segment] = field(default_factory=list)


class WorkflowBuilder:
    """Accumulates the calls of one workflow."""

    def __init__(self, hasher: BlockHasher, workflow: str, tenant: str, timestamp: float,
                 rng: np.random.Generator, cfg: GenConfig) -> None:
        self.hasher = hasher
        self.workflow = workflow
        self.tenant = tenant
        self.timestamp = timestamp
        self.rng = rng
        self.cfg = cfg
        self.calls: list[Call] = []
        self.threads: dict[str, AgentThread] = {}

    def thread(self, agent: str) -> AgentThread:
        t = self.threads.get(agent)
        if t is None:
            t = self.threads[agent] = AgentThread()
        return t

    def tool(self, name: str) -> float:
        """How long tool `name` runs this time (ms, before `tool_scale`): see `workloads.tools`."""
        return tool_ms(name, self.rng)

    def call(self, agent: str, new_segments: list[Segment], output_tokens: int, *,
             after: list[int] | None = None, think_ms: float = 0.0,
             signal: list[float] | None = None, output_key: Hashable | None = None,
             thread: str | None = None) -> int:
        """`agent` is called with its earlier prompt and output plus `new_segments`.

        Returns the call index; the output becomes part of the agent's thread under `output_key`
        (default: a key unique to this call), so other agents can be shown the same content.
        `thread` (default: the agent's name) selects the history: parallel instances of one agent
        keep separate threads (see `fork`). `think_ms` (tool, human or framework time before the
        call) is multiplied by `GenConfig.tool_scale` here, so no generator can forget it.
        """
        idx = len(self.calls)
        th = self.thread(thread if thread is not None else agent)
        th.segments.extend(s for s in new_segments if s[1] > 0)
        hash_ids, n_in = self.hasher.prompt(th.segments)
        key = output_key if output_key is not None else ("out", self.workflow, idx)
        out_seg = (key, max(0, int(output_tokens)))
        out_ids = self.hasher.output(th.segments, out_seg)
        if out_seg[1] > 0:
            th.segments.append(out_seg)
        c = Call(workflow=self.workflow, call=idx, input_length=n_in,
                 output_length=out_seg[1], hash_ids=hash_ids, agent=agent,
                 timestamp=self.timestamp if idx == 0 else None,
                 after=tuple(after) if after is not None else ((idx - 1,) if idx else ()),
                 think_ms=round(float(think_ms) * self.cfg.tool_scale, 3), output_hash_ids=out_ids,
                 tenant=self.tenant, signal=signal)
        self.calls.append(c)
        return idx

    def fork(self, src: str, dst: str) -> None:
        """Start thread `dst` as a copy of thread `src` (a parallel instance with the same history)."""
        self.threads[dst] = AgentThread(list(self.thread(src).segments))

    def reset(self, thread: str) -> None:
        """Forget a thread: the agent's next call starts a fresh prompt (a framework resetting it)."""
        self.threads.pop(thread, None)

    def output(self, idx: int) -> Segment:
        """Call `idx`'s output as a segment, to show it to another agent."""
        return (("out", self.workflow, idx), self.calls[idx].output_length)

    def event(self, logit: float, spread: float = 1.0) -> Event:
        """A decision: the logit gets content noise of sd `spread`, then a coin of sigmoid(logit)."""
        z = float(logit) + float(self.rng.normal(0.0, spread))
        return Event(z, bool(self.rng.uniform() < sigmoid(z)))

    def semantic(self, agent: str, state: Mapping[str, float],
                 content: Mapping[str, float] | None = None) -> list[float]:
        """The `signal` of a call: agent, hidden state and content directions, plus noise."""
        dim = self.cfg.signal_dim
        v = direction(f"agent:{agent}", dim).copy()
        for k, x in state.items():
            v += x * direction(f"state:{k}", dim)
        for k, x in (content or {}).items():
            v += x * direction(f"content:{k}", dim)
        return self.signal(v)

    def signal(self, hidden: np.ndarray, content: float = 0.0) -> list[float]:
        """A noisy view of the workflow's hidden state (plus a content term) as a call's `signal`."""
        noise = self.rng.normal(0.0, self.cfg.noise, size=hidden.shape)
        return [round(float(x), 4) for x in hidden + content + noise]

    def finish(self) -> list[Call]:
        for c in self.calls:
            c.last = False
        if self.calls:
            self.calls[-1].last = True
        return self.calls


class Workload:
    """A workflow generator. Subclasses set `name` and `summary` and implement `build`."""

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    # agent -> tokens of its system prompt and tool definitions (its anchor, shared across workflows)
    system: ClassVar[dict[str, int]] = {}
    # documented ranges of `agentrt stats` figures at the default config (checked by the tests):
    # calls_per_workflow, prompt_tokens, output_tokens (means), reuse_within, reuse_across (shares)
    expected: ClassVar[dict[str, tuple[float, float]]] = {}
    # options other than the defaults, as given (`registry.get_workload`): the header names them
    options: dict = {}

    def anchor(self, agent: str) -> Segment:
        """The agent's system prompt and tool definitions: the same content in every workflow."""
        return (("sys", self.name, agent), self.system[agent])

    def build(self, b: WorkflowBuilder) -> None:
        raise NotImplementedError

    def option_note(self) -> str:
        """What a trace's header description says about the options it was generated with."""
        if not self.options:
            return ""
        return " (options: " + ", ".join(f"{k}={v}" for k, v in sorted(self.options.items())) + ")"

    def header(self, cfg: GenConfig) -> TraceHeader:
        return TraceHeader(block_size=cfg.block_size, name=self.name,
                           description=self.summary + scale_note(cfg) + self.option_note(),
                           source="agentrt generator (synthetic)",
                           concurrency=cfg.concurrency if cfg.rate is None else None)

    def generate(self, cfg: GenConfig) -> Iterator[Call]:
        """The workflows' calls in file order (workflow by workflow, starts in time order)."""
        hasher = BlockHasher(cfg.block_size)
        rng = np.random.default_rng(cfg.seed)
        t_ms = 0.0
        for i in range(cfg.workflows):
            if cfg.rate is not None and i > 0:
                t_ms += float(rng.exponential(1000.0 / cfg.rate))
            b = WorkflowBuilder(hasher, f"{self.name}-{i}", cfg.tenant, round(t_ms, 3), rng, cfg)
            self.build(b)
            yield from b.finish()

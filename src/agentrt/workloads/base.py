"""The frame every workload generator fills in: seeded workflows of agent calls, written as a trace.

A generator describes one workflow at a time through a `WorkflowBuilder`: which agent calls, with
which prompt segments, after which calls, after how much tool or think time, producing how many
tokens. The builder turns segments into chained hash ids (`BlockHasher`), so prompt sharing in the
trace is exactly the content sharing the generator describes. Prompts are built the way agent
frameworks build them: the agent's system prompt and tool definitions first (its anchor, shared
by every workflow), then the task, then the history that agent sees; an agent called again
extends its earlier prompt and output (`AgentThread`).

Arrivals: Poisson at `rate` workflows per second, or closed loop with `concurrency` workflows at
once (written to the header; all timestamps 0). Everything is deterministic given `seed`.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from agentrt.trace.schema import Call, TraceHeader
from agentrt.workloads.hashing import BlockHasher, Segment


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

    def __post_init__(self) -> None:
        if self.workflows <= 0:
            raise ValueError(f"workflows must be > 0, got {self.workflows}")
        if self.rate is not None and self.rate <= 0:
            raise ValueError(f"rate must be > 0, got {self.rate}")
        if self.concurrency is not None and self.concurrency <= 0:
            raise ValueError(f"concurrency must be > 0, got {self.concurrency}")
        if self.rate is None and self.concurrency is None:
            self.concurrency = 16
        if not 0.0 <= self.noise <= 10.0:
            raise ValueError(f"noise must be in [0, 10], got {self.noise}")


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

    def call(self, agent: str, new_segments: list[Segment], output_tokens: int, *,
             after: list[int] | None = None, think_ms: float = 0.0,
             signal: list[float] | None = None, output_key: Hashable | None = None) -> int:
        """`agent` is called with its earlier prompt and output plus `new_segments`.

        Returns the call index; the output becomes part of the agent's thread under `output_key`
        (default: a key unique to this call), so other agents can be shown the same content.
        """
        idx = len(self.calls)
        th = self.thread(agent)
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
                 think_ms=round(float(think_ms), 3), output_hash_ids=out_ids, tenant=self.tenant,
                 signal=signal)
        self.calls.append(c)
        return idx

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

    def build(self, b: WorkflowBuilder) -> None:
        raise NotImplementedError

    def header(self, cfg: GenConfig) -> TraceHeader:
        return TraceHeader(block_size=cfg.block_size, name=self.name,
                           description=self.summary, source="agentrt generator (synthetic)",
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

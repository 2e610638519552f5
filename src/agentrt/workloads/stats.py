"""Per-trace statistics: the figures of docs/workloads.md (`agentrt stats FILE`).

Reuse is counted in file order over full prompt blocks, as a prefix cache sees them: a call's
leading blocks that were seen before (in any earlier prompt or output of its tenant) are
reusable, capped at input_length - 1 tokens as engines do (the same rule as the simulator's
infinite-cache bound). A reusable block is *within* when an earlier call of the same workflow had
it, else *across* (seen only in other workflows). The infinite-cache hit rate is their sum over
all prompt tokens. For generated traces file order is workflow by workflow; the bench's
`infinite` bound uses the replay's order instead, so the two can differ slightly.

Tool waits: of the calls after a workflow's first, the share issued after a think time (a tool,
a human; `think_ms` > 0), and the quantiles and mean of those think times. The rest follow their
predecessors at once (one agent handing over to another).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from agentrt.trace.reader import TraceReader
from agentrt.trace.schema import Call


@dataclass(slots=True)
class TraceStats:
    block_size: int
    workflows: int = 0
    calls: int = 0
    prompt_tokens: int = 0
    max_prompt_tokens: int = 0
    output_tokens: int = 0
    within_tokens: int = 0
    across_tokens: int = 0
    distinct_blocks: int = 0
    agent_calls: dict[str, int] = field(default_factory=dict)
    agent_orders: int = 0          # distinct sequences of agents over the workflows
    later_calls: int = 0           # calls after their workflow's first
    tool_waits: int = 0            # ... of which issued after a think time (think_ms > 0)
    wait_p50_ms: float = 0.0       # quantiles and mean of those think times
    wait_p90_ms: float = 0.0
    wait_p99_ms: float = 0.0
    wait_mean_ms: float = 0.0

    @property
    def agents(self) -> list[str]:
        return sorted(self.agent_calls)

    @property
    def calls_per_workflow(self) -> float:
        return self.calls / self.workflows if self.workflows else 0.0

    @property
    def mean_prompt_tokens(self) -> float:
        return self.prompt_tokens / self.calls if self.calls else 0.0

    @property
    def mean_output_tokens(self) -> float:
        return self.output_tokens / self.calls if self.calls else 0.0

    @property
    def reuse_within(self) -> float:
        return self.within_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def reuse_across(self) -> float:
        return self.across_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def infinite_hit_rate(self) -> float:
        return self.reuse_within + self.reuse_across

    @property
    def wait_share(self) -> float:
        """Share of the later calls that wait on a tool (or a human) first."""
        return self.tool_waits / self.later_calls if self.later_calls else 0.0

    def to_json(self) -> dict:
        out = asdict(self)
        out.update(agents=self.agents, calls_per_workflow=self.calls_per_workflow,
                   mean_prompt_tokens=self.mean_prompt_tokens,
                   mean_output_tokens=self.mean_output_tokens, reuse_within=self.reuse_within,
                   reuse_across=self.reuse_across, infinite_hit_rate=self.infinite_hit_rate,
                   wait_share=self.wait_share)
        return out


def compute_stats(calls: Iterable[Call], block_size: int) -> TraceStats:
    st = TraceStats(block_size=block_size)
    seen: set[tuple[str, int]] = set()                  # (tenant, block) seen anywhere
    wf_seen: dict[str, set[tuple[str, int]]] = {}       # per open workflow
    paths: dict[str, list[str]] = {}
    orders: set[tuple[str, ...]] = set()
    agents: Counter[str] = Counter()
    waits: list[float] = []
    for c in calls:
        st.calls += 1
        st.prompt_tokens += c.input_length
        st.max_prompt_tokens = max(st.max_prompt_tokens, c.input_length)
        st.output_tokens += c.output_length
        agent = c.agent if c.agent is not None else "-"
        agents[agent] += 1
        mine = wf_seen.get(c.workflow)
        if mine is None:
            mine = wf_seen[c.workflow] = set()
            paths[c.workflow] = []
            st.workflows += 1
        paths[c.workflow].append(agent)
        if len(paths[c.workflow]) > 1:
            st.later_calls += 1
            if c.think_ms > 0:
                waits.append(c.think_ms)
        keys = [(c.tenant, h) for h in c.hash_ids[:c.full_blocks(block_size)]]
        within = across = 0
        for k in keys:
            if k in mine:
                within += 1
            elif k in seen:
                across += 1
            else:
                break
        hit = (within + across) * block_size
        over = hit - min(hit, c.input_length - 1)
        # the cap drops the tail of the hit; the tail of a prefix hit is the workflow's own history
        w_tok = within * block_size
        a_tok = across * block_size
        cut = min(over, w_tok)
        w_tok -= cut
        a_tok -= over - cut
        st.within_tokens += w_tok
        st.across_tokens += a_tok
        new = keys + [(c.tenant, h) for h in c.output_hash_ids]
        mine.update(new)
        seen.update(new)
        if c.last:
            orders.add(tuple(paths.pop(c.workflow)))
            del wf_seen[c.workflow]
    for p in paths.values():
        orders.add(tuple(p))
    st.agent_calls = dict(sorted(agents.items()))
    st.agent_orders = len(orders)
    if waits:
        st.tool_waits = len(waits)
        st.wait_p50_ms, st.wait_p90_ms, st.wait_p99_ms = (
            float(q) for q in np.quantile(waits, (0.5, 0.9, 0.99)))
        st.wait_mean_ms = float(np.mean(waits))
    st.distinct_blocks = len(seen)
    return st


def trace_stats(path: str | Path) -> TraceStats:
    """Validate and summarise a trace file (streaming; memory follows distinct blocks)."""
    reader = TraceReader(path)
    return compute_stats(reader, reader.header.block_size)

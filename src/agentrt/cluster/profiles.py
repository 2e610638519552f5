"""What the agent-aware router remembers: agents across workflows, and the live workflows' threads.

- `AgentBook`: per agent (explicit, or inferred from the prompt's leading blocks exactly as the
  runtime infers it), its anchor (the leading hash ids its calls from different workflows share:
  system prompt and tools) and its share of the offered prefill work (an exponentially decayed
  sum of prompt tokens, so shares follow a changing mix). At most `max_agents` agents, least
  recently seen dropped first.
- `WorkflowBook`: per live workflow, its threads (one per agent: the replica its latest call ran
  on, its context size, how many calls are in flight and the latest one's prompt chain while
  any is), and per replica the footprint of the live threads placed there (the working set its
  cache must hold to keep them). Dropped at the workflow's end, after `silent_after_s` without a
  call in flight, or when more than `max_workflows` are live (least recently active first), so
  its size is bounded whatever the engine reports. Live workflows are kept in order of last
  activity (a call routed or finished), and those with no call in flight also in a second such
  order, so the silent ones are found at its front: a call that never finishes holds only its
  own workflow.
Time is passed in; nothing here reads a clock.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence

_RESCALE = 30.0     # renormalise agent weights when they reach e^30


class AgentEntry:
    __slots__ = ("anchor", "anchor_len", "workflows", "last_workflow", "work", "replicas")

    def __init__(self, chain: Sequence[int], workflow: str, max_blocks: int) -> None:
        self.anchor = tuple(chain[:max_blocks])
        self.anchor_len = 0               # blocks confirmed by a second workflow
        self.workflows = 1
        self.last_workflow = workflow
        self.work = 0.0                   # decayed prompt tokens routed for this agent
        self.replicas = 0                 # bit mask: replicas its calls were routed to


class AgentBook:
    def __init__(self, max_agents: int = 4096, max_anchor_blocks: int = 512,
                 decay_tokens: float = 5e7) -> None:
        self.max_agents = max_agents
        self.max_anchor_blocks = max_anchor_blocks
        self.decay_tokens = decay_tokens  # work decays by e every this many tokens routed in all
        self.agents: OrderedDict[tuple[str, str], AgentEntry] = OrderedDict()
        self.total = 0.0                  # tokens routed in all (since the last renormalisation)
        self.work_sum = 0.0

    def see(self, tenant: str, agent: str, workflow: str, chain: Sequence[int], tokens: int) -> AgentEntry:
        key = (tenant, agent)
        e = self.agents.get(key)
        if e is None:
            e = self.agents[key] = AgentEntry(chain, workflow, self.max_anchor_blocks)
            if len(self.agents) > self.max_agents:
                _, old = self.agents.popitem(last=False)
                self.work_sum -= old.work
        else:
            self.agents.move_to_end(key)
            if workflow != e.last_workflow:
                e.last_workflow = workflow
                e.workflows += 1
                a = e.anchor if e.anchor_len == 0 else e.anchor[:e.anchor_len]
                n = 0
                for x, y in zip(a, chain):
                    if x != y:
                        break
                    n += 1
                e.anchor_len = n
                if n < len(e.anchor):
                    e.anchor = e.anchor[:n]
        # exponential decay by routed volume: weigh the newcomer up instead of every entry down,
        # and renormalise all entries once the weight grows large
        self.total += tokens
        if self.total > self.decay_tokens * _RESCALE:
            f = math.exp(-_RESCALE)
            for x in self.agents.values():
                x.work *= f
            self.work_sum *= f
            self.total -= self.decay_tokens * _RESCALE
        w = tokens * math.exp(self.total / self.decay_tokens)
        e.work += w
        self.work_sum += w
        return e

    def share(self, e: AgentEntry) -> float:
        """The agent's share of the decayed work, over agents still remembered."""
        return e.work / self.work_sum if self.work_sum > 0 else 1.0

    def __len__(self) -> int:
        return len(self.agents)


class ThreadEntry:
    __slots__ = ("replica", "inflight", "tokens", "chain")

    def __init__(self, replica: int) -> None:
        self.replica = replica
        self.inflight = 0
        self.tokens = 0                   # its context after its latest call (prompt + output)
        self.chain: Sequence[int] = ()    # the latest call's prompt chain while a call is in flight


class WorkflowEntry:
    __slots__ = ("threads", "last_seen", "inflight", "home")

    def __init__(self, now: float) -> None:
        self.threads: dict[str, ThreadEntry] = {}
        self.last_seen = now
        self.inflight = 0
        self.home = -1                    # the replica of its latest call


class WorkflowBook:
    def __init__(self, max_workflows: int = 65536, silent_after_s: float = 600.0) -> None:
        if max_workflows < 1:
            raise ValueError(f"max_workflows must be >= 1, got {max_workflows}")
        self.max_workflows = max_workflows
        self.silent_after_s = silent_after_s
        # both least recently active first; `idle`: the live ones with no call in flight
        self.live: OrderedDict[tuple[str, str], WorkflowEntry] = OrderedDict()
        self.idle: OrderedDict[tuple[str, str], None] = OrderedDict()
        self.footprint: list[float] = []  # per replica: tokens of the live threads placed there

    def _move(self, t: ThreadEntry, replica: int, tokens: int) -> None:
        fp = self.footprint
        while len(fp) <= replica:
            fp.append(0.0)
        if t.replica >= 0:
            fp[t.replica] -= t.tokens
        fp[replica] += tokens
        t.replica = replica
        t.tokens = tokens

    def _drop(self, key: tuple[str, str]) -> None:
        w = self.live.pop(key)
        self.idle.pop(key, None)
        fp = self.footprint
        for t in w.threads.values():
            if t.replica >= 0:
                fp[t.replica] -= t.tokens

    def get(self, tenant: str, workflow: str) -> WorkflowEntry | None:
        return self.live.get((tenant, workflow))

    def routed(self, tenant: str, workflow: str, agent: str, replica: int, now: float,
               tokens: int = 0, chain: Sequence[int] = ()) -> None:
        key = (tenant, workflow)
        w = self.live.get(key)
        if w is None:
            w = self.live[key] = WorkflowEntry(now)
        else:
            self.live.move_to_end(key)
            self.idle.pop(key, None)
        t = w.threads.get(agent)
        if t is None:
            t = w.threads[agent] = ThreadEntry(-1)
        self._move(t, replica, tokens)
        t.chain = chain
        t.inflight += 1
        w.inflight += 1
        w.home = replica
        w.last_seen = now
        self._trim(now)

    def finished(self, tenant: str, workflow: str, agent: str, now: float) -> None:
        key = (tenant, workflow)
        w = self.live.get(key)
        if w is None:
            return
        t = w.threads.get(agent)
        if t is not None and t.inflight > 0:
            t.inflight -= 1
            if t.inflight == 0:
                t.chain = ()
        if w.inflight > 0:
            w.inflight -= 1
        w.last_seen = now
        self.live.move_to_end(key)
        if w.inflight == 0:
            self.idle[key] = None
            self.idle.move_to_end(key)

    def ended(self, tenant: str, workflow: str) -> None:
        if (tenant, workflow) in self.live:
            self._drop((tenant, workflow))

    def _trim(self, now: float) -> None:
        live, idle = self.live, self.idle
        while len(live) > self.max_workflows:
            self._drop(next(iter(live)))
        # silent ones: `idle` is in order of last activity, so they are at its front
        while idle:
            key = next(iter(idle))
            if now - live[key].last_seen > self.silent_after_s:
                self._drop(key)
            else:
                break

    def __len__(self) -> int:
        return len(self.live)

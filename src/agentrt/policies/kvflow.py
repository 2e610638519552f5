"""KVFlow baseline: a static agent step graph learned offline, steps-to-execution priorities, and
prefetch of the agents due next.

Model (after KVFlow, Pan et al. 2025)
- Offline (`train`): from a training trace, the agent step graph: an edge a -> b whenever a
  workflow called b right after a. Steps-to-execution from agent c to agent a is the shortest
  path length in that graph (all pairs, by BFS); it never changes online.
- A cached block's priority is the smallest steps-to-execution, over the live workflows that
  used it, from the workflow's current agent to the agent that used it; a parent carries the most
  urgent of its children (the runtime tags whole paths, so a parent's users include its
  children's). Blocks of finished workflows and of agents the graph never reaches go first; the
  farthest steps go next; ties by recency.
- Prefetch: for a workflow waiting between calls, the agents one step ahead in the graph have
  their thread (or, failing that, their anchor) loaded from the host tier, evicting only blocks
  whose steps-to-execution is larger.
Without training it learns nothing and behaves as LRU, apart from ranking finished workflows'
blocks first.
"""

from __future__ import annotations

from collections import deque

from agentrt.runtime import events as ev
from agentrt.runtime.actions import Prefetch
from agentrt.runtime.state import threads_of
from agentrt.runtime.policy import Policy, Prediction
from agentrt.runtime.identity import call_agent

FAR = 1 << 20


class KVFlowPolicy(Policy):
    name = "kvflow"
    description = "static step graph from a training trace, steps-to-execution eviction and prefetch (KVFlow)"
    dynamic = True
    wants_events = True
    needs_tags = True
    acts = True
    needs_training = True

    def __init__(self, prefetch: bool = True, prefetch_blocks: int = 256, seed: int = 0) -> None:
        super().__init__(seed)
        self.prefetch = prefetch
        self.prefetch_blocks = prefetch_blocks
        # successors as insertion-ordered dicts, not sets: `act` prefetches in this order, and a
        # set of strings would order them by PYTHONHASHSEED
        self.edges: dict[str, dict[str, None]] = {}
        self.dist: dict[str, dict[str, int]] = {}
        self.trained_calls = 0

    # ------------------------------------------------------------------ offline
    def train(self, calls, block_size: int = 16) -> None:
        last: dict[tuple[str, str], str] = {}
        for c in calls:
            agent = call_agent(c, block_size)
            prev = last.get((c.tenant, c.workflow))
            if prev is not None:
                self.edges.setdefault(prev, {})[agent] = None
            else:
                self.edges.setdefault(agent, {})
            last[(c.tenant, c.workflow)] = agent
            if c.last:
                last.pop((c.tenant, c.workflow), None)
            self.trained_calls += 1
        self.dist = {a: self._bfs(a) for a in self.edges}

    def _bfs(self, src: str) -> dict[str, int]:
        out: dict[str, int] = {}
        q = deque([(src, 0)])
        seen = {src}
        while q:
            a, d = q.popleft()
            for b in self.edges.get(a, ()):
                if b not in out:
                    out[b] = d + 1
                if b not in seen:
                    seen.add(b)
                    q.append((b, d + 1))
        return out

    def steps(self, current: str, agent: str) -> int:
        return self.dist.get(current, {}).get(agent, FAR)

    # ------------------------------------------------------------------ online
    def observe(self, e) -> None:
        t = type(e)
        if t is ev.WorkflowEnded or ((t is ev.CallArrived or t is ev.CallFinished) and not e.call.warmup):
            self.epoch += 1

    def block_steps(self, block) -> int:
        tag = block.meta
        best = FAR
        if tag is None:
            return best
        for th in threads_of(tag):
            wf = th.workflow
            if wf.ended or not wf.path:
                continue
            cur = wf.path[-1]
            s = 0 if (cur == th.agent and wf.running) else self.steps(cur, th.agent)
            if s < best:
                best = s
        return best

    def score(self, block):
        return (-self.block_steps(block), block.last_touch)

    def predict(self, horizon: int) -> dict[tuple[str, str], Prediction]:
        out = {}
        for wf in self.runtime.workflows.values():
            if not wf.path:
                continue
            d = self.dist.get(wf.path[-1], {})
            steps = []
            for k in range(1, horizon + 1):
                due = [a for a, s in d.items() if s == k]
                steps.append({a: 1.0 / len(due) for a in due})
            out[wf.key] = Prediction(wf.id, steps, [0.0] * horizon)
        return out

    def act(self, now: float, view) -> list:
        if not self.prefetch or view.host_blocks == 0:
            return []
        out = []
        for wf in self.runtime.between_calls.values():
            if wf.running or not wf.path:
                continue
            for agent in self.edges.get(wf.path[-1], ()):
                th = wf.threads.get(agent)
                node = th.last_node if th is not None else None
                if node is None:
                    prof = self.runtime.profile(wf.tenant, agent)
                    if prof is None or not prof.anchor:
                        continue
                    node = view.lookup(wf.tenant, prof.anchor)
                if node is not None and view.on_host(node):
                    # make room only from blocks due later than one step from now
                    out.append(Prefetch(wf.tenant, node, self.prefetch_blocks, (-1, -1), "kvflow-next"))
        return out

    def state_bytes(self) -> int:
        return sum(100 + 60 * len(v) for v in self.edges.values()) + sum(
            100 + 60 * len(v) for v in self.dist.values())

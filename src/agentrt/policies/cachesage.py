"""CacheSage: online agent transitions, a survival score, and cross-session warm-up.

Model (after the CacheSage paper and the authors' published vLLM hooks)
- Transition learner: each workflow's consecutive agents (and END when it finishes) feed a
  sliding-window first-order Markov model (`TransitionLearner`, window 8).
- Survival: for every live workflow, a bounded BFS of `lookahead` (3) hops from its current agent
  gives the probability that each agent runs within the next steps; across workflows
  survival(a) = 1 - prod(1 - p_w(a)). Computed lazily once per change, not per block.
- Score of a block = 4.0 x its survival + exp(-0.1 x its age in block touches), ties broken by
  recency, so with nothing learned it is exactly LRU. A block inside an agent's anchor (its
  system prompt and tools, shared across sessions) takes the agent's survival over all live
  workflows; any other block belongs to one session and takes the survival of its agent within
  that session's own workflow (0 once the session has ended).
- Cross-session warm-up: between scheduler steps, when the engine is idle, for a workflow waiting
  on a tool or its framework, predict its next agent; if that agent's anchor (system prompt and
  tools, confirmed by two workflows) is not on the GPU, ask for a warm-up request holding only
  the anchor and a minimal user message. Warm-ups are never learned from.
Agents are identified by the runtime (explicit names or anchor hashes); anchors are the leading
blocks an agent's calls share across two or more workflows.

Cost: what a live workflow contributes depends only on its current agent (its "start"), so the
policy keeps, per start, how many live workflows sit there and which of them wait between calls
(in the order they went idle). Survival is recomputed over distinct starts (one bounded BFS each,
cached until the learner changes), anchors only for the agents whose profile changed, and the
idle warm-up scan visits distinct starts, not workflows: nothing per interval or per event is
proportional to the number of open workflows. A workflow the runtime ended only to stay within
its caps (reason "cap") teaches no END transition.
"""

from __future__ import annotations

import math

from agentrt.runtime import events as ev
from agentrt.runtime.actions import WarmUp
from agentrt.runtime.state import threads_of
from agentrt.runtime.policy import Policy, Prediction
from agentrt.policies.transitions import END, TransitionLearner
from agentrt.policies.timing import MAX_AGENT_KEYS
from agentrt.runtime.window import TenantKeyed


class CacheSagePolicy(Policy):
    name = "cachesage"
    description = "online Markov agent transitions, survival score, cross-session warm-up (CacheSage)"
    dynamic = True
    wants_events = True
    needs_tags = True
    acts = True

    def __init__(self, lookahead: int = 3, window: int = 8, survival_weight: float = 4.0,
                 recency_decay: float = 0.1, warmup: bool = True, warmup_min_prob: float = 0.5,
                 warmup_message_tokens: int = 8, seed: int = 0) -> None:
        super().__init__(seed)
        if lookahead < 1:
            raise ValueError(f"lookahead must be >= 1, got {lookahead}")
        self.lookahead = lookahead
        self.learner = TransitionLearner(window)
        self.survival_weight = survival_weight
        self.recency_decay = recency_decay
        self.warmup = warmup
        self.warmup_min_prob = warmup_min_prob
        self.warmup_message_tokens = warmup_message_tokens
        self._survival: dict[tuple[str, str], float] = {}
        self._dirty = True
        # agents warmed and not yet called, bounded max-min by tenant (an entry leaves when its
        # agent calls; one never called again would otherwise stay for good)
        self._warming: dict[tuple[str, str], float] = TenantKeyed(MAX_AGENT_KEYS)
        self.warmups_issued = 0
        # per live workflow with a path: its start (tenant, current agent); live workflows per start
        self._start: dict[str, tuple[str, str]] = {}
        self._starts: dict[tuple[str, str], int] = {}
        # reach from each start (agent name -> p), valid for learner.observations == _reach_at
        self._reach: dict[tuple[str, str], dict[str, float]] = {}
        self._reach_at = -1
        # idle workflows (between calls) per start, in the order they went idle (seq numbers)
        self._idle: dict[tuple[str, str], dict[str, int]] = {}
        self._idle_of: dict[str, tuple[str, str]] = {}
        self._seq = 0
        # anchors: tenant -> hash -> how many confirmed agent anchors hold it
        self._anchors: dict[str, dict[int, int]] = {}
        self._anchor_of: dict[tuple[str, str], frozenset] = {}
        self._anchor_dirty: dict[tuple[str, str], None] = {}
        self._dropped_seen = 0
        self.reach_runs = 0          # BFS runs (the cost of survival; for tests)
        self.act_visits = 0          # starts the warm-up scan looked at (the cost of act)

    # ------------------------------------------------------------------ observe
    def observe(self, e) -> None:
        t = type(e)
        if t is ev.CallArrived:
            info = e.call
            if info.warmup:
                return
            wid = info.workflow
            wf = self.runtime.workflows.get(wid)
            if wf is not None and len(wf.path) >= 2:
                self.learner.observe((wf.tenant, wf.path[-2]), (wf.tenant, wf.path[-1]))
            self._not_idle(wid)
            if wf is not None and wf.path:
                self._move(wid, (wf.tenant, wf.path[-1]))
            self._anchor_dirty[(info.tenant, info.agent)] = None
            self._warming.pop((info.tenant, info.agent), None)
            self._changed()
        elif t is ev.CallFinished:
            if not e.call.warmup:
                wid = e.call.workflow
                start = self._start.get(wid)
                if (start is not None and wid not in self._idle_of
                        and wid in self.runtime.between_calls):
                    self._seq += 1
                    self._idle.setdefault(start, {})[wid] = self._seq
                    self._idle_of[wid] = start
                self._changed()
        elif t is ev.WorkflowEnded:
            wf = self.runtime.workflows.get(e.workflow)
            if wf is not None and wf.path and getattr(e, "reason", "end") != "cap":
                self.learner.observe((wf.tenant, wf.path[-1]), END)
            self._not_idle(e.workflow)
            self._move(e.workflow, None)
            self._changed()

    def _changed(self) -> None:
        self._dirty = True
        self.epoch += 1

    def _move(self, wid: str, start: tuple[str, str] | None) -> None:
        """The workflow's start becomes `start` (None: it left)."""
        old = self._start.get(wid)
        if old == start:
            return
        if old is not None:
            n = self._starts[old] - 1
            if n:
                self._starts[old] = n
            else:
                del self._starts[old]
        if start is None:
            del self._start[wid]
        else:
            self._start[wid] = start
            self._starts[start] = self._starts.get(start, 0) + 1

    def _not_idle(self, wid: str) -> None:
        start = self._idle_of.pop(wid, None)
        if start is not None:
            group = self._idle[start]
            del group[wid]
            if not group:
                del self._idle[start]

    # ------------------------------------------------------------------ score
    def _reach_from(self, start: tuple[str, str]) -> dict[str, float]:
        if self._reach_at != self.learner.observations:
            self._reach.clear()
            self._reach_at = self.learner.observations
        r = self._reach.get(start)
        if r is None:
            self.reach_runs += 1
            r = self._reach[start] = {a[1]: p for a, (_, p) in
                                      self.learner.reach(start, self.lookahead).items()}
        return r

    def _recompute(self) -> None:
        # survival(a) = 1 - prod over live workflows w of (1 - p_w(a)); p_w depends only on w's
        # start, so the product runs over distinct starts, each factor to the power of its count
        keep: dict[tuple[str, str], float] = {}
        for start, n in self._starts.items():
            tenant = start[0]
            for name, p in self._reach_from(start).items():
                a = (tenant, name)
                keep[a] = keep.get(a, 1.0) * (1.0 - p) ** n
        self._survival = {a: 1.0 - q for a, q in keep.items()}
        self._refresh_anchors()
        self._dirty = False

    def _refresh_anchors(self) -> None:
        rt = self.runtime
        dropped = getattr(rt, "profiles_dropped", 0)
        if dropped != self._dropped_seen:
            # profiles left the runtime's table: rebuild from what is there (rare: > max_agents)
            self._dropped_seen = dropped
            self._anchors.clear()
            self._anchor_of.clear()
            self._anchor_dirty = dict.fromkeys(rt.agents)
        if not self._anchor_dirty:
            return
        for key in self._anchor_dirty:
            prof = rt.agents.get(key)
            new = frozenset(prof.anchor) if (prof is not None and prof.anchor_workflows >= 2
                                             and prof.anchor) else frozenset()
            old = self._anchor_of.get(key, frozenset())
            if new == old:
                continue
            refs = self._anchors.setdefault(key[0], {})
            for h in old - new:
                c = refs[h] - 1
                if c:
                    refs[h] = c
                else:
                    del refs[h]
            for h in new - old:
                refs[h] = refs.get(h, 0) + 1
            if new:
                self._anchor_of[key] = new
            else:
                self._anchor_of.pop(key, None)
            if not refs:
                del self._anchors[key[0]]
        self._anchor_dirty.clear()

    def survival(self, tenant: str, agent: str) -> float:
        if self._dirty:
            self._recompute()
        return self._survival.get((tenant, agent), 0.0)

    def score(self, block):
        if self._dirty:
            self._recompute()
        s = 0.0
        tag = block.meta
        if tag is not None and self._survival:
            tenant = block.tenant
            shared = block.hash in self._anchors.get(tenant, ())
            for th in threads_of(tag):
                if shared:
                    v = self._survival.get((tenant, th.agent), 0.0)
                elif not th.workflow.ended:
                    start = self._start.get(th.workflow.id)
                    v = self._reach_from(start).get(th.agent, 0.0) if start is not None else 0.0
                else:
                    continue
                if v > s:
                    s = v
        age = self.runtime.touch_clock() - block.last_touch
        return (self.survival_weight * s + math.exp(-self.recency_decay * age), block.last_touch)

    # ------------------------------------------------------------------ predict / act
    def predict(self, horizon: int) -> dict[str, Prediction]:
        out = {}
        for wf in self.runtime.workflows.values():
            if not wf.path:
                continue
            dist = {(wf.tenant, wf.path[-1]): 1.0}
            steps, ends, ended = [], [], 0.0
            for _ in range(horizon):
                nxt: dict = {}
                for a, p in dist.items():
                    for b, q in self.learner.next_probs(a).items():
                        nxt[b] = nxt.get(b, 0.0) + p * q
                ended += nxt.pop(END, 0.0)
                ends.append(ended)
                steps.append({b[1]: p for b, p in nxt.items()})
                dist = nxt
            out[wf.id] = Prediction(wf.id, steps, ends)
        return out

    def act(self, now: float, view) -> list:
        """The first idle workflow (in the order they went idle) whose likely next agent's anchor
        is missing from the GPU gets that anchor warmed. What decides it is the workflow's start,
        so the scan visits distinct starts, each at the position of its longest-idle workflow."""
        if not self.warmup or not view.idle or not self._idle:
            return []
        rt = self.runtime
        groups = self._idle
        for start in sorted(groups, key=lambda k: next(iter(groups[k].values()))):
            self.act_visits += 1
            probs = self.learner.next_probs(start)
            if not probs:
                continue
            nxt, p = max(probs.items(), key=lambda kv: (kv[1], str(kv[0])))
            if nxt == END or p < self.warmup_min_prob:
                continue
            key = nxt
            if key in self._warming:
                continue
            prof = rt.profile(*key)
            if prof is None or prof.anchor_workflows < 2 or not prof.anchor:
                continue
            tenant = start[0]
            if view.gpu_prefix(tenant, prof.anchor) >= len(prof.anchor):
                continue
            self._warming[key] = now
            self.warmups_issued += 1
            bs = view.block_size
            return [WarmUp(tenant, key[1], list(prof.anchor),
                           len(prof.anchor) * bs + self.warmup_message_tokens)]
        return []

    def state_bytes(self) -> int:
        return (self.learner.state_bytes() + 80 * len(self._survival) + 80 * len(self._warming)
                + 100 * len(self._start) + 100 * len(self._idle_of) + 80 * len(self._starts)
                + sum(60 * len(r) for r in self._reach.values())
                + sum(40 * len(r) for r in self._anchors.values()))

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
cached until the learner changes), anchors only for the agents whose profile changed. The idle
warm-up scan (`idle_starts.py`) visits distinct starts, not workflows, tenants in turn and each
tenant's longest-idle first, at most `act_max_visits` starts per `act` (`act_tenant_visits` of one
tenant); a start nothing was learned from (an invented agent id) is parked after one visit until
the learner sees it again. So neither open workflows nor the agent ids a client invents make an
`act` cost more, and one tenant's idle workflows never hold back another's warm-ups. A workflow
the runtime ended only to stay within its caps (reason "cap") teaches no END transition.
Workflows are keyed (tenant, workflow id), as the runtime keys them.
"""

from __future__ import annotations

import math

from agentrt.runtime import events as ev
from agentrt.runtime.actions import WarmUp
from agentrt.runtime.state import threads_of
from agentrt.runtime.policy import Policy, Prediction
from agentrt.policies.idle_starts import BARREN, IdleStarts
from agentrt.policies.transitions import END, TransitionLearner
from agentrt.runtime.window import MAX_AGENT_KEYS, TenantKeyed


class CacheSagePolicy(Policy):
    name = "cachesage"
    description = "online Markov agent transitions, survival score, cross-session warm-up (CacheSage)"
    dynamic = True
    wants_events = True
    needs_tags = True
    acts = True

    def __init__(self, lookahead: int = 3, window: int = 8, survival_weight: float = 4.0,
                 recency_decay: float = 0.1, warmup: bool = True, warmup_min_prob: float = 0.5,
                 warmup_message_tokens: int = 8, act_max_visits: int = 256,
                 act_tenant_visits: int = 64, seed: int = 0) -> None:
        super().__init__(seed)
        if lookahead < 1:
            raise ValueError(f"lookahead must be >= 1, got {lookahead}")
        for name, v in (("act_max_visits", act_max_visits), ("act_tenant_visits", act_tenant_visits)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        self.act_max_visits = act_max_visits
        self.act_tenant_visits = act_tenant_visits
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
        self._start: dict[tuple[str, str], tuple[str, str]] = {}
        self._starts: dict[tuple[str, str], int] = {}
        # reach from each start (agent name -> p), valid for learner.observations == _reach_at
        self._reach: dict[tuple[str, str], dict[str, float]] = {}
        self._reach_at = -1
        # idle workflows (between calls) per start, in the order they went idle
        self._idle = IdleStarts()
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
            wid = info.key
            wf = self.runtime.workflows.get(wid)
            if wf is not None and len(wf.path) >= 2:
                self._learn((wf.tenant, wf.path[-2]), (wf.tenant, wf.path[-1]))
            self._idle.leave(wid)
            if wf is not None and wf.path:
                self._move(wid, (wf.tenant, wf.path[-1]))
            self._anchor_dirty[(info.tenant, info.agent)] = None
            self._warming.pop((info.tenant, info.agent), None)
            self._changed()
        elif t is ev.CallFinished:
            if not e.call.warmup:
                wid = e.call.key
                start = self._start.get(wid)
                if start is not None and wid in self.runtime.between_calls:
                    self._idle.join(wid, start)
                self._changed()
        elif t is ev.WorkflowEnded:
            wf = self.runtime.workflows.get(e.key)
            if wf is not None and wf.path and getattr(e, "reason", "end") != "cap":
                self._learn((wf.tenant, wf.path[-1]), END)
            self._idle.leave(e.key)
            self._move(e.key, None)
            self._changed()

    def _learn(self, src: tuple[str, str], dst) -> None:
        self.learner.observe(src, dst)
        self._idle.revive(src)         # what a warm-up from `src` could be has changed

    def _changed(self) -> None:
        self._dirty = True
        self.epoch += 1

    def _move(self, wid: tuple[str, str], start: tuple[str, str] | None) -> None:
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
                    start = self._start.get(th.workflow.key)
                    v = self._reach_from(start).get(th.agent, 0.0) if start is not None else 0.0
                else:
                    continue
                if v > s:
                    s = v
        age = self.runtime.touch_clock() - block.last_touch
        return (self.survival_weight * s + math.exp(-self.recency_decay * age), block.last_touch)

    # ------------------------------------------------------------------ predict / act
    def predict(self, horizon: int) -> dict[tuple[str, str], Prediction]:
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
            out[wf.key] = Prediction(wf.id, steps, ends)
        return out

    def act(self, now: float, view) -> list:
        """An idle workflow whose likely next agent's anchor is missing from the GPU gets that
        anchor warmed. What decides it is the workflow's start, so the scan visits distinct
        starts: tenants in turn, each tenant's longest-idle first, within the visit bounds
        (`idle_starts.py`)."""
        if not self.warmup or not view.idle or not self._idle:
            return []
        found, visits = self._idle.scan(lambda start: self._judge(start, view),
                                        self.act_max_visits, self.act_tenant_visits)
        self.act_visits += visits
        if found is None:
            return []
        key, prof = found
        self._warming[key] = now
        self.warmups_issued += 1
        return [WarmUp(key[0], key[1], list(prof.anchor),
                       len(prof.anchor) * view.block_size + self.warmup_message_tokens)]

    def _judge(self, start: tuple[str, str], view):
        """(next agent, its profile) to warm from `start`; None: not now; BARREN: nothing until
        the learner sees `start` again (no successor likely enough to warm)."""
        probs = self.learner.next_probs(start)
        if not probs:
            return BARREN
        nxt, p = max(probs.items(), key=lambda kv: (kv[1], str(kv[0])))
        if nxt == END or p < self.warmup_min_prob:
            return BARREN
        if nxt in self._warming:
            return None
        prof = self.runtime.profile(*nxt)
        if prof is None or prof.anchor_workflows < 2 or not prof.anchor:
            return None
        if view.gpu_prefix(start[0], prof.anchor) >= len(prof.anchor):
            return None
        return nxt, prof

    def state_bytes(self) -> int:
        return (self.learner.state_bytes() + 80 * len(self._survival) + 80 * len(self._warming)
                + 100 * len(self._start) + 100 * len(self._idle.of) + 80 * len(self._starts)
                + sum(60 * len(r) for r in self._reach.values())
                + sum(40 * len(r) for r in self._anchors.values()))

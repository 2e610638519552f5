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
"""

from __future__ import annotations

import math

from agentrt.runtime import events as ev
from agentrt.runtime.actions import WarmUp
from agentrt.runtime.state import threads_of
from agentrt.runtime.policy import Policy, Prediction
from agentrt.policies.transitions import END, TransitionLearner


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
        self._per_wf: dict[str, dict[str, float]] = {}
        self._anchors: dict[str, set[int]] = {}
        self._dirty = True
        self._warming: dict[tuple[str, str], float] = {}
        self.warmups_issued = 0

    # ------------------------------------------------------------------ observe
    def observe(self, e) -> None:
        t = type(e)
        if t is ev.CallArrived:
            info = e.call
            if info.warmup:
                return
            wf = self.runtime.workflows.get(info.workflow)
            if wf is not None and len(wf.path) >= 2:
                self.learner.observe((wf.tenant, wf.path[-2]), (wf.tenant, wf.path[-1]))
            self._warming.pop((info.tenant, info.agent), None)
            self._changed()
        elif t is ev.CallFinished:
            if not e.call.warmup:
                self._changed()
        elif t is ev.WorkflowEnded:
            wf = self.runtime.workflows.get(e.workflow)
            if wf is not None and wf.path:
                self.learner.observe((wf.tenant, wf.path[-1]), END)
            self._changed()

    def _changed(self) -> None:
        self._dirty = True
        self.epoch += 1

    # ------------------------------------------------------------------ score
    def _recompute(self) -> None:
        surv: dict[tuple[str, str], float] = {}
        keep: dict[tuple[str, str], float] = {}
        per_wf: dict[str, dict[str, float]] = {}
        for wf in self.runtime.workflows.values():
            if not wf.path or wf.ended:
                continue
            mine = per_wf[wf.id] = {}
            for a, (_, p) in self.learner.reach((wf.tenant, wf.path[-1]), self.lookahead).items():
                keep[a] = keep.get(a, 1.0) * (1.0 - p)
                mine[a[1]] = p
        for a, q in keep.items():
            surv[a] = 1.0 - q
        anchors: dict[str, set[int]] = {}
        for (tenant, _), prof in self.runtime.agents.items():
            if prof.anchor_workflows >= 2 and prof.anchor:
                anchors.setdefault(tenant, set()).update(prof.anchor)
        self._survival = surv
        self._per_wf = per_wf
        self._anchors = anchors
        self._dirty = False

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
                    v = self._per_wf.get(th.workflow.id, {}).get(th.agent, 0.0)
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
        if not self.warmup or not view.idle:
            return []
        rt = self.runtime
        for wf in rt.between_calls.values():
            if wf.running or not wf.path:
                continue
            probs = self.learner.next_probs((wf.tenant, wf.path[-1]))
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
            if view.gpu_prefix(wf.tenant, prof.anchor) >= len(prof.anchor):
                continue
            self._warming[key] = now
            self.warmups_issued += 1
            bs = view.block_size
            return [WarmUp(wf.tenant, key[1], list(prof.anchor),
                           len(prof.anchor) * bs + self.warmup_message_tokens)]
        return []

    def state_bytes(self) -> int:
        return self.learner.state_bytes() + 80 * len(self._survival) + 80 * len(self._warming)

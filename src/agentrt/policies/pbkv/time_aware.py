"""PBKV-TA: PBKV's lookahead predictor, made time-aware, with dead-block detection and anchors.

PBKV-HE ranks a live workflow's blocks by a discounted sum of the predictor's step probabilities:
steps, not time. A workflow idling 60 s on a test run and one whose next call lands in 50 ms look
alike, and a thread the predictor never expects again keeps its blocks as long as its workflow
lives. Eviction is about time: Belady drops the block whose next use is farthest. This policy ranks
blocks by their expected hits per second of residency (hit density, as in LHD, Beckmann et al.,
NSDI 2018), estimated from the runtime's knowledge of agents:

- Step times. For each live workflow w the next call starts at T_1: if a call is in flight,
  now plus its agent's mean *residual* service time given how long the call has run, plus the
  mean gap after that agent's calls; if w waits between calls, now plus the mean residual gap
  after its last agent's calls *of the same kind* (ended in a tool call, or not: the runtime's
  tool-call flag), given how long it has waited; where the framework announced how long the
  tool runs (`CallFinished.tool_expected_s`), the agent's tool waits updated by that
  announcement, weighed by how far earlier announcements were off (`announced.py`). Residuals come from the latest observed
  durations (tool waits are heavy-tailed: a call that has waited long will likely wait longer;
  past everything observed, as long again). Later steps add the
  expected step cost under the predicted agent distribution: T_{k+1} = T_k + sum_a P_k(a) c_a,
  c_a = service + gap of agent a. Every mean is measured online per (tenant, agent); unknown
  agents take the global mean. No constant is tuned to a workload.
- Thread density. With the predictor's joint out[w, k, a] (= s_w^(k) P_w^(k)(a)) as p_k, the
  probability that thread (w, a) is next used at step k first is f_k = p_k prod_{j<k}(1 - p_j);
  F = sum_k f_k. Its expected residency until that use is L = sum_k f_k (T_k - now) +
  (1 - F)(T_{K+1} - now) (if unused within the horizon it is kept to the horizon at most), and
  its density is F / L. A thread the predictor does not expect within K steps (F -> 0), or in a
  workflow likely to end, gets density -> 0: dead blocks of live workflows go before live ones.
- Anchor density. A block of an agent's anchor (its system prompt and tools, confirmed by two
  workflows) is read by every thread of that agent: live threads count through their own
  densities; beyond them, the next new thread of the agent in any workflow of the tenant reads it.
  With new threads starting at mean gap g_a, that is a density of 1 / g_a (memoryless arrivals;
  `anchors.py`).
  Anchors rank above the blocks of ended workflows, which is right only where a workflow's end
  says its blocks are dead: a tenant whose workflows are all one call (a trace or client without
  workflow identity, as Mooncake's: each turn of a conversation is its own "workflow", and the
  next turn reads the "ended" one) gets no anchors until one of its workflows makes a second
  call; its blocks then rank as PBKV-LAE's (LRU). With anchors there, PBKV-TA lost 1.8 points to
  LRU on Mooncake's synthetic trace at a load that does not saturate the replica.
- Conversations without identity (option `turns`, off by default: measured by
  `benchmarks/turns.py`, it gains on Mooncake's conversation trace and loses up to 1.1 points on
  an identity-less coding-agent trace). For such a tenant the ended blocks are ranked by the
  turn of the latest request that read them and their age (`turns.py`): a request that re-sends
  a whole earlier prompt is that conversation's next turn, the hazard of a follow-up is learned
  online per turn class and age, and a block's key is its expected follow-ups per second of
  residency (ties, and tenants with no follow-up yet, by recency as LRU).
- A block's key: blocks of finished workflows that are no anchor go first (LRU among them, as
  PBKV-LAE, or with `turns` by follow-up density where workflows carry no identity); then the lowest density (the sum over its live threads; an anchor block takes the larger
  of that and its agent's new-thread density); ties by recency.
- Dead branches. When a thread's history is rewritten (compaction, a window, a dropped attempt),
  the runtime untags the branch it left (`runtime/branches.py`): those blocks no live thread will
  read go with the retired ones.
- Tail survival (option `tails`, off by default until every table is re-run with it; measured by
  `benchmarks/tails.py`). Many agents' next prompt drops the last blocks of their previous call (a
  ledger rewritten each step, an answer summarised rather than quoted); the dead-branch rule
  retires them only once that call arrives. With `tails`, each agent's dropped-tail lengths are
  learned online (when a thread's next call arrives: blocks at the end of its previous path the
  new prompt does not share), and a block j blocks above its thread's leaf counts that thread's
  density times P(dropped <= j), the chance the next call still reads it.
- Prefetch as `pbkv` (conservative), ranked by the same predictor.
- Online forecasts (option `online`, on by default). Where the trained predictor knows nothing
  (there is none: a live engine started without `--predictor`; or it never saw the workflow's
  current agent), the forecast comes from agent transitions learned online, per tenant
  (`online_steps.py`). Where it does know the agent it is kept, unless the online model has
  forecast that agent's successors decisively better over its latest calls (`forecast_judge.py`:
  a predictor trained on another application whose agents share names). Mixing the two
  forecasts by recent log loss was measured and did not pay. With `online=false` (no judge
  either) and no predictor every thread density is 0 and the policy is PBKV-LAE with anchors
  kept by their agents' call rates.
The keys depend on `now` (the latest event's time); they are refreshed once per event (epoch),
within the cache's contract.
"""

from __future__ import annotations

import numpy as np

from agentrt.policies.pbkv.anchors import AgentAnchors
from agentrt.policies.pbkv.forecast_judge import ForecastJudge
from agentrt.policies.pbkv.online_steps import OnlineSteps
from agentrt.policies.pbkv.policy import PBKVPolicy
from agentrt.policies.pbkv.timing import TINY, AgentTimes, Tail, dropped, thread_density
from agentrt.policies.pbkv.turns import TurnHazard
from agentrt.policies.transitions import END
from agentrt.runtime import events as ev
from agentrt.runtime.state import threads_of
from agentrt.runtime.window import MAX_AGENT_KEYS, TenantKeyed, window_in


class PBKVTimePolicy(PBKVPolicy):
    name = "pbkv-ta"
    description = ("PBKV time-aware (agentrt): blocks ranked by expected hits per second from the "
                   "lookahead predictor, agent service/tool times and anchor call rates")

    untags_dead_branches = True

    def __init__(self, tails: bool = False, online: bool = True, turns: bool = False, **options) -> None:
        super().__init__(**options)
        self.tails = bool(tails)
        self.online = bool(online)
        self.turns = bool(turns)
        self._steps: OnlineSteps | None = None   # online forecasts (option `online`)
        self.judge = ForecastJudge()             # trained or online, per agent (option `online`)
        self._out_len: dict[tuple[str, str], int] = {}   # (tenant, workflow) -> path length its `_out` forecast saw
        # per-agent tables, bounded max-min by tenant (`TenantKeyed`)
        self._tail: dict[tuple[str, str], Tail] = TenantKeyed(MAX_AGENT_KEYS)   # agent -> blocks its next call drops
        self.now = 0.0
        self.times = AgentTimes()
        self.anchors = AgentAnchors()     # agents' anchor blocks and thread-start rates (`anchors.py`)
        self._multi: set[str] = set()     # tenants one of whose workflows made a second call
        # inferred conversation turns of the other tenants (option `turns`)
        self._turns: TurnHazard | None = TurnHazard() if self.turns else None

    # ------------------------------------------------------------------ observe
    def observe(self, e) -> None:
        self.now = e.now
        t = type(e)
        if t is ev.CallArrived and not e.call.warmup:
            self._arrived(e)
        elif t is ev.CallFinished and not e.call.warmup:
            self.times.finished(e.now, e.call, e.tool_call, e.tool_expected_s)
        elif t is ev.WorkflowEnded:
            self.times.ended(e.key)
            if self.online:
                self._learn_end(e)
            self._out_len.pop(e.key, None)
        super().observe(e)

    def _arrived(self, e) -> None:
        info = e.call
        key = (info.tenant, info.agent)
        self.times.arrived(e.now, info)
        wf = self.runtime.workflows.get(info.key)
        if self.online and wf is not None:
            if len(wf.path) >= 2:
                self._judge(wf, wf.path[-2], info.agent, len(wf.path) - 1)
            self._learn_step(wf, info.agent)
        if wf is not None and wf.calls >= 2:
            self._multi.add(info.tenant)
        if self.turns and info.tenant not in self._multi:
            self._turns.arrived(info.tenant, info.hash_ids, e.now)
        th = wf.threads.get(info.agent) if wf is not None else None
        if self.tails and th is not None and th.calls > 1 and th.last_node is not None:
            window_in(self._tail, key, MAX_AGENT_KEYS, Tail).add(dropped(th.last_node, info.hash_ids))
        if th is not None and th.calls == 1:
            # a thread starts: the calls that read an anchor without a live thread holding it
            self.anchors.thread_started(key, e.now)
        prof = self.runtime.profile(info.tenant, info.agent) if self.runtime is not None else None
        if prof is not None:
            self.anchors.update(key, prof)

    def anchor_density(self, tenant: str, hash_id: int) -> float | None:
        if tenant not in self._multi:
            return None          # one-call workflows: their ends say nothing (see the docstring)
        return self.anchors.density(tenant, hash_id)

    # ------------------------------------------------------------------ online forecasts
    def _online_steps(self) -> OnlineSteps:
        if self._steps is None:
            k = self.predictor.horizon if self.predictor is not None else self.horizon
            self._steps = OnlineSteps(k)
        return self._steps

    def _learn_step(self, wf, agent: str) -> None:
        """A call of `agent` arrived (the runtime has appended it to the workflow's path)."""
        if len(wf.path) >= 2:
            self._online_steps().observe(wf.tenant, wf.path[-2], agent)

    def _learn_end(self, e) -> None:
        wf = self.runtime.workflows.get(e.key)
        if e.reason != "cap" and wf is not None and wf.path:
            self._judge(wf, wf.path[-1], END, len(wf.path))
            self._online_steps().observe(e.tenant, wf.path[-1], END)

    def _judge(self, wf, src: str, dst: str, seen: int) -> None:
        """Score the trained and the online forecast of the call after `src`'s (`dst`: an agent
        or END), both made before it: the trained one from the workflow's latest prediction if
        that saw the first `seen` calls of its path, i.e. was made after `src`'s call arrived."""
        if src not in self._index or self._out_len.get(wf.key) != seen:
            return
        o = self._out.get(wf.key)
        if o is None:
            return
        j = o.shape[1] - 1 if dst == END else self._index.get(dst)
        p_trained = float(o[0, j]) if j is not None else 0.0
        self.judge.record(wf.tenant, src, p_trained, self._online_steps().next_prob(wf.tenant, src, dst))

    def _predict_dirty(self) -> list:
        got = super()._predict_dirty()
        for w, _ in got:
            self._out_len[w.key] = len(w.path)
        return got

    # ------------------------------------------------------------------ densities
    def _refresh(self) -> None:
        self._predict_dirty()
        if self.online or (self.predictor is not None and self._out):
            self._densities()

    def _densities(self) -> None:
        """Hit density of every live thread (see the module docstring). A workflow's forecast is
        the trained predictor's; with `online`, where the predictor does not know its current
        agent (or there is none), the online model's (`online_steps.py`)."""
        steps = self._online_steps() if self.online else None
        pred_agents = self.predictor.agents if self.predictor is not None else []
        idx = self._index
        now = self.now
        times = self.times
        svc_all = times.svc_all.mean(0.0)
        gap_all = times.gap_all.mean(0.0)
        # step-cost vectors in this refresh: per tenant over the predictor's agents, and per
        # (tenant, current agent) over the agents an online forecast reaches
        pred_costs: dict[str, np.ndarray] = {}
        row_costs: dict[tuple[str, str], np.ndarray] = {}
        costs: dict[tuple[str, str], float] = {}
        for wf in self.runtime.workflows.values():
            if wf.ended or not wf.path:
                continue
            tenant, current = wf.tenant, wf.path[-1]
            if steps is not None and (current not in idx or self.judge.prefers_online(tenant, current)):
                got = steps.rows(tenant, current)
                if got is None:
                    for th in wf.threads.values():
                        th.value = 0.0
                    continue
                index, p = got
                c = row_costs.get((tenant, current))
                if c is None:
                    c = row_costs[(tenant, current)] = np.array(
                        [self._cost(costs, tenant, a, svc_all, gap_all) for a in index])
            else:
                o = self._out.get(wf.key)
                if o is None:
                    continue
                p, index = o[:, :-1], idx                   # (K, V)
                c = pred_costs.get(tenant)
                if c is None:
                    c = pred_costs[tenant] = np.array(
                        [self._cost(costs, tenant, a, svc_all, gap_all) for a in pred_agents])
            alive = p.sum(axis=1)
            step = (p @ c) / np.maximum(alive, TINY)     # expected cost of each step
            at = times.next_start(wf, now, svc_all, gap_all) + np.concatenate(([0.0], np.cumsum(step)))
            dens = thread_density(p, np.maximum(at - now, 0.0))   # T_1 .. T_{K+1} from now
            for agent, th in wf.threads.items():
                i = index.get(agent)
                th.value = float(dens[i]) if i is not None else 0.0

    def _cost(self, memo: dict, tenant: str, agent: str, svc_all: float, gap_all: float) -> float:
        """An agent's expected step cost: its mean service time plus the mean gap after it."""
        c = memo.get((tenant, agent))
        if c is None:
            c = memo[(tenant, agent)] = (self.times.svc_mean(tenant, agent, svc_all)
                                         + self.times.gap_mean(tenant, agent, None, gap_all))
        return c

    # ------------------------------------------------------------------ score
    def score(self, block):
        if self._dirty:
            self._refresh()
        s = 0.0
        active = False
        tag = block.meta
        if tag is not None:
            for th in threads_of(tag):
                if not th.workflow.ended:
                    active = True
                    v = th.value
                    if v and self._tail:
                        tail = self._tail.get((th.workflow.tenant, th.agent))
                        leaf = th.last_node
                        if tail is not None and leaf is not None:
                            v *= tail.kept(leaf.depth - block.depth)
                    s += v
        if self.anchors:
            a = self.anchor_density(block.tenant, block.hash)
            if a is not None:
                active = True
                if a > s:
                    s = a
        if not active:
            if self.turns and block.tenant not in self._multi:
                d = self._turns.density(block.tenant, block.hash, self.now)
                if d is not None:
                    return (0, d, block.last_touch)
            return (0, 0.0, block.last_touch)
        return (1, s, block.last_touch)

    def stats(self) -> dict[str, int | float]:
        """How many agents the forecast judge has handed from the trained predictor to the
        online model (a predictor that does not fit this deployment shows here)."""
        return {"forecasts_overruled": self.judge.online_agents(), "forecasts_judged": len(self.judge)}

    def state_bytes(self) -> int:
        n = self.anchors.blocks()
        online = self._steps.state_bytes() if self._steps is not None else 0
        turns = self._turns.state_bytes() if self._turns is not None else 0
        return (super().state_bytes() + 120 * n + 150 * (self.times.entries() + len(self.anchors.starts))
                + 60 * len(self._multi)
                + online + turns + self.judge.state_bytes() + 100 * len(self._out_len))

"""`agent`: agentrt's agent-aware router. A call goes where its first token is expected soonest,
counting what a miss costs the cluster, not only the call.

Model (every term in seconds of one replica's prefill, from `ClusterHints`; no constant is tuned
to a workload)
- wait(r) = prefill tokens queued on r / prefill speed + requests on r x one decode step.
- A thread (one agent inside one workflow; the agent explicit, or inferred from the prompt's
  leading blocks as the runtime infers it) whose context is still resident on the replica of its
  latest call (more cached there than the agent's anchor) stays there, unless
  wait(home) - 2 x cached(home) > wait(r) - 2 x cached(r) for some r: leaving gives up the
  cached prefix twice, once recomputed now and once as the dead copy left behind, which crowds
  the home's cache until it ages out. Elsewhere at most the agent's anchor is cached; it is
  credited on replicas the agent has run on, without a lookup, so this path (most calls of a
  running workflow) costs one prefix lookup. This is migration off an overloaded home.
- A parallel instance (a call of a thread that already has one in flight, sharing more than the
  agent's anchor with it: a fan-out forked from one history) goes where that call went. The
  shared prefix is being computed there, and the instances' results are joined, so the queue
  the first one waits in is already on the workflow's path: another replica would only compute
  the shared prefix again and keep a second copy of it (without this, most fan-outs split).
- Otherwise (a new thread, or one whose home evicted its context: nothing is lost by moving it)
  the call is placed at the least
      wait(r) - 2 x cached(r) + (1 - capacity(r) / (footprint(r) + context)) x context
  where cached(r) is looked up on every replica (anchors and any shared prefix count; a prefix
  cached elsewhere is again worth two prefills: recomputed here, and copied), and the
  last term is the share of this thread's context (prompt + output) that r's live working set
  would push out before its next call: footprint(r) sums the contexts of the live threads placed
  on r, including those waiting on tools, which no load counter sees. So new workflows go where
  the cache has room for them, and a replica about to evict live workflows receives fewer.
- With peer transfer (`ClusterHints.transfer_tokens_per_s` > 0, `transfer.py`) a prefix cached
  elsewhere is not recomputed but copied: each block given up costs its transfer time instead of
  one of its two prefills (the dead copy left behind still counts one), so calls leave a loaded
  home more readily.
- Option `spread` (off by default; measured, see docs/routers.md): anchors placed, not copied
  everywhere: each agent gets the first ceil(N x its share of recent prefill work) + 1 replicas of
  its own rendezvous-hash order, and placing a thread outside them costs the anchor's prefill once
  more (the copy displaces as much cache elsewhere).
- A one-call workflow (its first call is its last: a Mooncake line, a request that named no
  workflow) has no thread to follow and no context coming back; it goes where `prefix` would
  send it (longest cached prefix unless the load is imbalanced), as PBKV-TA ranks such blocks as
  LRU does. With the cost model above instead (`one_call_prefix=False`) such traffic trades hits
  for queueing: on Mooncake at 16 replicas 1.7 points of hit rate for a 33% lower p99 TTFT
  (docs/routers.md).
Ties go to the agent's rendezvous order.

State: `AgentBook` and `WorkflowBook` (`profiles.py`), both bounded (live workflows dropped at
their end, when silent, or over `max_workflows`; agents over `max_agents`). Time is passed in.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence

from agentrt.cluster.baselines import PrefixRouter
from agentrt.cluster.profiles import AgentBook, WorkflowBook
from agentrt.cluster.routing import ReplicaView, RouteRequest, Router
from agentrt.runtime.identity import anchor_agent
from agentrt.trace.chain import shared_blocks


def rendezvous_order(tenant: str, agent: str, n: int) -> list[int]:
    """Replicas ordered by a stable hash of (tenant, agent, replica): the agent's placement order."""
    key = f"{tenant}\x00{agent}\x00".encode()
    return sorted(range(n), key=lambda i: (zlib.crc32(key + str(i).encode()), i))


class AgentRouter(Router):
    name = "agent"
    description = "agent-aware: follows each workflow's context, leaves an overloaded home, places new threads by wait and live working set"

    def __init__(self, seed: int = 0, max_workflows: int = 65536, max_agents: int = 4096,
                 silent_after_s: float = 600.0, anchor_tokens: int = 256,
                 spread: bool = False, future: bool = True, load_weight: float = 1.0,
                 decode_weight: float = 1.0, copy_cost: float = 2.0, one_call_prefix: bool = True) -> None:
        super().__init__(seed)
        self.one_call = PrefixRouter(seed) if one_call_prefix else None
        self.agents = AgentBook(max_agents=max_agents)
        self.workflows = WorkflowBook(max_workflows=max_workflows, silent_after_s=silent_after_s)
        self.anchor_tokens = anchor_tokens
        self.spread = spread
        self.future = future
        self.load_weight = load_weight
        self.decode_weight = decode_weight
        # what a cached block is worth where it is, in prefills of it: computed again elsewhere,
        # and a second copy left crowding a cache
        self.copy_cost = copy_cost
        self._orders: dict[tuple[str, str], list[int]] = {}   # bounded by the agent book

    def _agent(self, request: RouteRequest) -> str:
        if request.agent:
            return request.agent
        bs = self.hints.block_size if self.hints is not None else 16
        return anchor_agent(request.hash_ids, request.prompt_tokens, bs, self.anchor_tokens)

    def _order(self, tenant: str, agent: str, n: int) -> list[int]:
        key = (tenant, agent)
        o = self._orders.get(key)
        if o is None or len(o) != n:
            if len(self._orders) > 2 * self.agents.max_agents:
                self._orders.clear()
            o = self._orders[key] = rendezvous_order(tenant, agent, n)
        return o

    def route(self, request: RouteRequest, replicas: Sequence[ReplicaView], now: float) -> int:
        if self.one_call is not None and request.call_index == 0 and request.last:
            return self.one_call.route(request, replicas, now)
        n = len(replicas)
        hints = self.hints
        bs = hints.block_size if hints is not None else 16
        speed = hints.prefill_tokens_per_s if hints is not None else 20_000.0
        step_s = hints.decode_s_per_token if hints is not None else 0.02
        # what a cached block is worth where it is: recomputed (or, when replicas copy KV,
        # fetched) elsewhere, plus the dead copy left behind crowding a cache
        fetch = hints.transfer_tokens_per_s if hints is not None else 0.0
        credit = bs / (fetch if fetch > speed else speed) + (self.copy_cost - 1.0) * bs / speed
        agent = self._agent(request)
        tenant = request.tenant
        e = self.agents.agents.get((tenant, agent))
        order = self._order(tenant, agent, n)
        anchor = e.anchor_len if e is not None else 0
        lw, dw = self.load_weight / speed, self.decode_weight * step_s
        wait = [lw * v.queued_tokens + dw * (v.running + v.waiting) for v in replicas]
        w = self.workflows.get(tenant, request.workflow)
        t = w.threads.get(agent) if w is not None else None
        if t is not None and 0 <= t.replica < n:
            h = t.replica
            m = replicas[h].cached_blocks(tenant, request.hash_ids)
            if t.inflight > 0 and shared_blocks(request.hash_ids, t.chain, request.prompt_tokens // bs) > max(m, anchor):
                return h              # a parallel instance: joins the one computing its prefix
            if m > anchor:
                # the thread's context is resident at home: stay unless the wait there exceeds an
                # alternative's by more than the cache given up, counted twice (recomputed now,
                # and its copy left behind as dead weight). Elsewhere at most the agent's anchor
                # is cached, credited where the agent has run (not looked up: one lookup per
                # decision on this path, the common one)
                best, best_cost = h, wait[h] - credit * m
                ran = e.replicas if e is not None else 0
                for i in order:
                    c = wait[i] - (credit * anchor if ran >> i & 1 else 0.0)
                    if c < best_cost:
                        best, best_cost = i, c
                return best
        return self._place(request, replicas, order, e, wait, bs, speed, credit)

    def _place(self, request: RouteRequest, replicas: Sequence[ReplicaView], order: list[int], e,
               wait: list[float], bs: int, speed: float, credit: float) -> int:
        """A new thread, or one whose context is gone: the least expected time to its first
        token, plus the share of its context the replica's live working set would push out."""
        n = len(replicas)
        fp = self.workflows.footprint
        while len(fp) < n:
            fp.append(0.0)
        in_group = None
        spread_s = 0.0
        anchor = e.anchor_len if e is not None else 0
        if self.spread and anchor > 0 and n > 1:
            k = min(n, math.ceil(n * self.agents.share(e)) + 1)
            in_group = set(order[:k])
            spread_s = anchor * bs / speed
        ctx = request.prompt_tokens + request.output_tokens
        tenant, chain = request.tenant, request.hash_ids
        best, best_cost = order[0], math.inf
        for i in order:
            v = replicas[i]
            cost = wait[i] - v.cached_blocks(tenant, chain) * credit
            if in_group is not None and i not in in_group:
                cost += spread_s
            if self.future:
                cap = v.capacity_blocks * bs
                f = fp[i] + ctx
                if f > cap:
                    cost += ctx * (1.0 - cap / f) / speed
            if cost < best_cost:
                best, best_cost = i, cost
        return best

    def on_routed(self, request: RouteRequest, replica: int, now: float) -> None:
        agent = self._agent(request)
        e = self.agents.see(request.tenant, agent, request.workflow, request.hash_ids, request.prompt_tokens)
        e.replicas |= 1 << replica
        self.workflows.routed(request.tenant, request.workflow, agent, replica, now,
                              request.prompt_tokens + request.output_tokens, request.hash_ids)

    def on_finished(self, request: RouteRequest, replica: int, now: float) -> None:
        self.workflows.finished(request.tenant, request.workflow, self._agent(request), now)

    def on_workflow_end(self, workflow: str, tenant: str, now: float) -> None:
        self.workflows.ended(tenant, workflow)

    def state_size(self) -> int:
        return len(self.workflows) + len(self.agents) + len(self._orders)

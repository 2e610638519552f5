"""agentrt's routers inside Ray Serve: a `RequestRouter` that asks an agentrt `cluster` router.

Model
- Ray Serve creates one request router per deployment handle (in the ingress replica that calls
  the vLLM deployment) and calls `choose_replicas` for each pending request. This class reads the
  request's `AgentCall` (built by the ingress: identity and prompt block ids, `call.py`), shows
  the agentrt router one `ReplicaState` per replica (`replica_state.py`: the replica's KV cache
  mirrored from its vLLM KV events, and what this router has in flight there), and returns the
  router's ranking as Ray's tiers: the first choice alone, then each next one. Ray then sends the
  request to the first tier whose replica accepts it (below `max_ongoing_requests`), so load
  back-pressure stays Ray's.
- Replicas have stable slots: a replica keeps its index for its life and a new replica takes the
  lowest free slot, because agentrt routers remember replicas by index (a workflow's home). A
  slot without a live replica is shown as `DownView` (nothing cached, infinite load) and never
  returned.
- Ray's hooks drive the agentrt ones: `on_request_routed` (the replica accepted the request) ->
  `on_routed`; `on_request_completed` -> `on_finished`, and `on_workflow_end` after a workflow's
  last call. Time is `time.monotonic()`.
- KV events: each replica reports its publisher endpoint, block size and KV capacity through
  Ray's `record_replica_metadata` hook (`deploy.py`); the router subscribes once it sees them.
  A replica without an endpoint is modelled from what was routed to it (see replica_state.py).
- A request that is not an `AgentCall` (a caller that bypassed the ingress) gets all replicas
  in one tier: Ray's least-queue choice among them.
Options (`request_router_kwargs`): `router` (an agentrt router name, `agentrt routers`),
`router_options` (its constructor keywords), `block_size`, `prefill_tokens_per_s` and
`decode_s_per_token` (one replica's speed, for routers with a cost model: `ClusterHints`),
`transfer_tokens_per_s` (how fast replicas copy KV from each other when a peer-to-peer KV
connector links them; 0: they do not),
`kv_events` (subscribe to replicas' publishers; default true), `provisional_s`, `max_inflight`.
"""

from __future__ import annotations

import importlib
import logging
import time
import weakref
from collections import OrderedDict, deque
from dataclasses import dataclass
from ray.serve.request_router import PendingRequest, ReplicaID, RequestRouter, RunningReplica

from agentrt.cluster.registry import make_router
from agentrt.cluster.routing import ClusterHints, RouteRequest, Router
from agentrt.ray.call import AgentCall
from agentrt.ray.kv_events import KVEventListener
from agentrt.ray.replica_state import ReplicaState

log = logging.getLogger(__name__)


@dataclass(slots=True, frozen=True)
class DownView:
    """An empty slot: shown so indices stay stable, never chosen, left out of load comparisons."""

    live = False

    def cached_blocks(self, tenant: str, hash_ids) -> int:
        return 0

    running = 1 << 30
    waiting = 0
    queued_tokens = 1 << 30
    free_blocks = 0
    capacity_blocks = 0
    evicted_blocks = 0


DOWN = DownView()
HIDDEN = ("url", "kv_events")     # replica metadata the unauthenticated stats endpoint leaves out
# every router of this process, for the ingress's /agentrt/router endpoint
LIVE: weakref.WeakSet = weakref.WeakSet()


def call_of(pending: PendingRequest | None) -> AgentCall | None:
    if pending is None:
        return None
    for arg in (*pending.args, *pending.kwargs.values()):
        if isinstance(arg, AgentCall):
            return arg
    return None


class AgentRTRequestRouter(RequestRouter):
    """Ray Serve request router running an agentrt router (see the module docstring)."""

    def initialize_state(self, router: str = "agent", router_options: dict | None = None,
                         block_size: int = 32, kv_events: bool = True,
                         prefill_tokens_per_s: float = 20_000.0, decode_s_per_token: float = 0.02,
                         provisional_s: float = 30.0, max_inflight: int = 100_000,
                         transfer_tokens_per_s: float = 0.0) -> None:
        self.router: Router = make_router(router, **(router_options or {}))
        self.hints = ClusterHints(block_size=block_size, prefill_tokens_per_s=prefill_tokens_per_s,
                                  decode_s_per_token=decode_s_per_token,
                                  transfer_tokens_per_s=transfer_tokens_per_s)
        self.router.bind(self.hints)
        self.block_size = block_size
        self.provisional_s = provisional_s
        self.slots: list[ReplicaID | None] = []
        self.states: dict[ReplicaID, ReplicaState] = {}
        self.subscribed: dict[ReplicaID, str] = {}
        self.metadata: dict[ReplicaID, dict] = {}
        self.inflight: OrderedDict[str, tuple[RouteRequest, ReplicaID, int]] = OrderedDict()
        self.max_inflight = max_inflight
        self.listener = KVEventListener() if kv_events else None
        self.decisions = 0
        self.recent: deque = deque(maxlen=32)    # (ranked slots, cached blocks per slot, running per slot)
        # Ray ships the router class to the handle's process with cloudpickle, which may copy this
        # module's globals; the registry must be the imported module's own
        importlib.import_module(__name__).LIVE.add(self)

    # replicas ----------------------------------------------------------------------------
    def update_replicas(self, replicas: list[RunningReplica]) -> None:
        super().update_replicas(replicas)
        live = {r.replica_id: r for r in replicas}
        for i, rid in enumerate(self.slots):
            if rid is not None and rid not in live:
                self._forget(rid)
                self.slots[i] = None
        for rid, r in live.items():
            if rid not in self.states:
                self._adopt(rid, r.replica_metadata)

    def on_replica_actor_died(self, replica_id: ReplicaID) -> None:
        super().on_replica_actor_died(replica_id)
        if replica_id in self.states:
            self.slots[self.slots.index(replica_id)] = None
            self._forget(replica_id)

    def _adopt(self, rid: ReplicaID, meta: dict) -> None:
        self.metadata[rid] = dict(meta)
        endpoint = meta.get("kv_events") if self.listener is not None else None
        self.states[rid] = ReplicaState(block_size=int(meta.get("block_size") or self.block_size),
                                        capacity=int(meta.get("num_blocks") or 0),
                                        events=bool(endpoint), provisional_s=self.provisional_s,
                                        prefill_tokens_per_s=self.hints.prefill_tokens_per_s)
        if None in self.slots:
            self.slots[self.slots.index(None)] = rid
        else:
            self.slots.append(rid)
        if endpoint:
            self.listener.subscribe(rid, endpoint, meta.get("kv_topic", ""))
            self.subscribed[rid] = endpoint

    def _forget(self, rid: ReplicaID) -> None:
        self.states.pop(rid, None)
        self.metadata.pop(rid, None)
        if self.subscribed.pop(rid, None) is not None:
            self.listener.unsubscribe(rid)

    def _sync(self, now: float) -> None:
        if self.listener is not None:
            for rid, events in self.listener.drain():
                state = self.states.get(rid)
                if state is not None:
                    state.apply(events)
        for state in self.states.values():
            state.tick(now)

    # routing -----------------------------------------------------------------------------
    async def choose_replicas(self, candidate_replicas: list[RunningReplica],
                              pending_request: PendingRequest | None = None) -> list[list[RunningReplica]]:
        call = call_of(pending_request)
        if call is None or not candidate_replicas:
            return [list(candidate_replicas)] if candidate_replicas else []
        now = time.monotonic()
        self._sync(now)
        by_id = {r.replica_id: r for r in candidate_replicas}
        for rid, r in by_id.items():
            if rid not in self.states:
                self._adopt(rid, r.replica_metadata)
        views = [self.states[rid] if rid in by_id else DOWN for rid in self.slots]
        req = call.route_request()
        order = self.router.rank(req, views, now)
        self.decisions += 1
        # no workflow key or tenant: the endpoint that shows these is not authenticated
        self.recent.append((order, [v.cached_blocks(req.tenant, req.hash_ids) for v in views],
                            [v.running for v in views]))
        tiers = [[by_id[self.slots[i]]] for i in order if self.slots[i] in by_id]
        return tiers or [list(candidate_replicas)]

    def on_request_routed(self, pending_request: PendingRequest, replica_id: ReplicaID, result) -> None:
        call = call_of(pending_request)
        state = self.states.get(replica_id)
        if call is None or state is None:
            return
        key = pending_request.metadata.internal_request_id
        req = call.route_request()
        slot = self.slots.index(replica_id)
        now = time.monotonic()
        state.tick(now)
        state.note_routed(key, req.hash_ids, req.prompt_tokens)
        self.inflight[key] = (req, replica_id, slot)
        self.router.on_routed(req, slot, now)
        while len(self.inflight) > self.max_inflight:   # a completion Ray never reported
            old, (_, rid, _) = self.inflight.popitem(last=False)
            if rid in self.states:
                self.states[rid].note_finished(old)

    def on_request_completed(self, replica_id: ReplicaID, internal_request_id: str) -> None:
        entry = self.inflight.pop(internal_request_id, None)
        if entry is None:   # a rejected request (Ray retries it): never routed here
            return
        req, rid, slot = entry
        state = self.states.get(rid)
        if state is not None:
            state.note_finished(internal_request_id)
        now = time.monotonic()
        self.router.on_finished(req, slot, now)
        if req.last:
            self.router.on_workflow_end(req.workflow, req.tenant, now)

    # introspection -----------------------------------------------------------------------
    def stats(self) -> dict:
        """Per-slot mirror figures (for logs and tests)."""
        out = {"decisions": self.decisions, "router_state": self.router.state_size(),
               "recent": list(self.recent), "replicas": []}
        for i, rid in enumerate(list(self.slots)):   # may be read from the ingress's thread
            s = self.states.get(rid) if rid is not None else None
            if s is None:
                out["replicas"].append(None)
                continue
            out["replicas"].append({
                "slot": i, "replica": rid.unique_id, "events": s.events, "resident": len(s.resident),
                "provisional": len(s.provisional), "evicted": s.evicted, "stored": s.stored,
                "unresolved": s.unresolved, "inflight": s.running,
                "gaps": self.listener.gaps.get(rid, 0) if self.listener else 0,
                "metadata": {k: v for k, v in self.metadata.get(rid, {}).items() if k not in HIDDEN}})
        return out


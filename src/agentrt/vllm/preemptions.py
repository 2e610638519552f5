"""Requests vLLM preempts, seen by the hosted runtime (`hosted.py`): their blocks stay ranked.

Model (vLLM 0.32): when a step needs blocks and too few are free, vLLM preempts a running request
(under FCFS the latest admitted, under priority scheduling the lowest priority). It frees the
request's blocks, which stay cached until reused, and queues the request to run again with prefix
hits on whatever of them survived. No connector hook fires; the step's `SchedulerOutput` names
the request in `preempted_req_ids`, read at the step's end (`HostedRuntime.step`). Its completed
blocks that vLLM still caches, found by its block hashes (the first cached copy of each), enter
the mirror as a finished request's do and carry its thread (`AgentRuntime.keep_preempted`), as
the simulator keeps a preempted call's blocks (`engine/preemption.py`): the policy ranks them
like any cached block, and a thread with a call in flight is one agent-aware policies keep.
Unmirrored hashed blocks go to the head of vLLM's free queue at each re-ordering (`reorder.py`),
before every ranked block, so without this a preempted request's blocks went first.
A request vLLM preempted between steps (a prefix-cache reset) may be allocated again before the
step's output names it: it then runs and is not marked waiting. One aborted while waiting to run
again finishes with the path it had kept (no blocks of its own then), so its thread's latest
path is that one.
A resumed request's latest prefix lookup is its hit (what the tenant ledger counts); when it is
allocated again that hit is logged (`resumed`) and counted, since vLLM's own Prometheus
prefix-cache counters leave preempted requests out. No event either way: the call is still in
flight. `Preemptions` owns the preempted requests' state (`resuming`, `preempted_at`) and is
given the hosted runtime's mirror, runtime, request tables, counts and event log.
"""

from __future__ import annotations

from collections.abc import Callable

from agentrt.cache.block import Block
from agentrt.runtime import events as ev
from agentrt.runtime.runtime import AgentRuntime
from agentrt.vllm.eventlog import EventLog
from agentrt.vllm.mirror import Mirror
from agentrt.wire.identity import Identity

GROUP0_ID = 0   # the KV cache group the mirror follows (one group: no hybrid models)


class Preemptions:
    """Requests vLLM preempted: their blocks mirrored, their resumption counted."""

    def __init__(self, mirror: Mirror, runtime: AgentRuntime,
                 reqs: dict[str, tuple[ev.CallInfo, Identity, object]], waiting: set[str],
                 counts: dict[str, int], elog: EventLog, watch: Callable[[list[int]], None]) -> None:
        self.mirror = mirror
        self.runtime = runtime
        self._reqs = reqs            # the owner's requests in flight (read only)
        self._waiting = waiting      # the owner's requests waiting for blocks (a preempted one joins)
        self.counts = counts         # the owner's counts: preempted, preempted_blocks, resumed, ...
        self.elog = elog
        self._watch = watch
        self.resuming: set[str] = set()           # preempted, not yet allocated again
        self.preempted_at: dict[str, Block] = {}  # request id -> deepest node it kept when preempted

    def preempted(self, request_id: str, pool) -> bool:
        """vLLM preempted the request: mirror the blocks it completed that vLLM still caches,
        first block first, tagged with its thread. Returns whether the mirror changed."""
        entry = self._reqs.get(request_id)
        if entry is None or pool is None:
            return False
        info, idt, request = entry
        if getattr(getattr(request, "status", None), "name", None) != "RUNNING":
            self.resuming.add(request_id)
            self._waiting.add(request_id)      # it holds no blocks until allocated again
        # else: preempted between steps (a prefix-cache reset) and allocated again by this step
        # before its output named it: it runs, and holds blocks
        blocks = []
        for h in request.block_hashes:
            cached = pool.get_cached_block(h, [GROUP0_ID])
            if not cached:
                break
            blocks.append(cached[0])
        fresh: list[int] = []
        if blocks:
            node, fresh = self.mirror.add_path(blocks, idt.tenant)
            self._watch(fresh)
            self.runtime.keep_preempted(info.rid, node)
            self.preempted_at[request_id] = node   # its path, should it be aborted before it runs
        self.counts["preempted"] += 1
        self.counts["preempted_blocks"] += len(blocks)
        self.elog.write("preempted", request=request_id, workflow=info.workflow, agent=info.agent,
                        blocks=len(blocks), fresh=len(fresh), mirrored=len(self.mirror))
        return bool(blocks)

    def allocated(self, request_id: str) -> None:
        """vLLM allocated the request's blocks: if it was preempted, it resumes now."""
        if request_id in self.resuming:
            self._resumed(request_id)

    def _resumed(self, request_id: str) -> None:
        """A preempted request was allocated again: its latest lookup's hit is what survived."""
        self.resuming.discard(request_id)
        entry = self._reqs.get(request_id)
        hit = (entry[0].extra.get("admitted") or 0) if entry is not None else 0
        self.counts["resumed"] += 1
        self.counts["resumed_hit_tokens"] += hit
        self.elog.write("resumed", request=request_id, local_hit_tokens=hit)

    def finished(self, request_id: str) -> Block | None:
        """The request finished (or was aborted): forget it; the path it kept when preempted, if any."""
        self.resuming.discard(request_id)
        return self.preempted_at.pop(request_id, None)

    def clear(self) -> None:
        self.resuming.clear()
        self.preempted_at.clear()

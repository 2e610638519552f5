"""`oracle`: a clairvoyant eviction policy run inside the simulator (a bound, simulator only).

Model
- It knows the future of the trace: for every cached block (tenant, hash id), the calls that will
  read it in their prompt. Calls are placed on one reference timeline, a list of (workflow, call
  index) in admission order taken from an earlier replay of the same trace (the bench uses the
  LRU replay's order, then the oracle's own order from its previous pass: see `bench.runner`).
- Eviction order (lowest key first): blocks that no future call reads, least recently touched
  first; then the block whose next reader is farthest on the timeline (Belady's MIN).
- A call's future uses are consumed when it is admitted (`CallAdmitted`): from then on each of
  its prompt blocks is next read by the call after it. Keyed by call identity, not by time, so a
  replay whose order drifts from the reference never skips a use.
- Everything else is the simulator's: locks of running requests, reservations, output blocks,
  chunked prefill, queueing. So unlike `belady` (which ignores memory held by running requests and
  may drop a block before it is used) it is reachable by an online policy that guessed perfectly;
  "gap closed" is measured against it.

Score contract: a block's next use changes only when a call that reads it is admitted, and such a
call locks every cached block of its prompt, so the cache re-scores it on unlock; no epochs needed.
A call served without the cache (larger than the whole pool) is never admitted to it; its uses are
consumed when it finishes, with an epoch bump. Warm-ups are ignored and a call's uses are consumed
once (a re-admission after a preemption changes nothing).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

from agentrt.errors import AgentrtError
from agentrt.runtime import events as ev
from agentrt.runtime.policy import Policy
from agentrt.trace.schema import Call

NEVER = float("inf")
R = TypeVar("R")


def best_of_passes(order, passes: int, replay: Callable[[object, int], tuple[int, R, object]]) -> tuple[R, int]:
    """Run the oracle up to `passes` times and keep the pass with the most hits.

    `replay(order, i)` runs pass `i` on the reference order `order` and returns (hit tokens, its
    result, its own admission order). The first pass takes `order` (an earlier replay's); each
    later pass takes the previous pass's own order, which is closer to the oracle's timing, and the
    passes stop once a pass admits in the order it was given. Every pass is a valid clairvoyant
    run, so the best one is kept. Returns (the best pass's result, passes run).
    """
    if passes < 1:
        raise ValueError(f"passes must be >= 1, got {passes}")
    best: R | None = None
    best_hits = -1
    for i in range(passes):
        hits, result, admitted = replay(order, i)
        if hits > best_hits:
            best, best_hits = result, hits
        if admitted == order:
            return best, i + 1
        order = admitted
    return best, passes


class FutureUses:
    """For each (tenant, hash id): the reference positions of the calls that read it, ascending."""

    __slots__ = ("uses", "position", "block_size")

    def __init__(self, calls: Iterable[Call], order: list[tuple[str, int]], block_size: int) -> None:
        self.block_size = block_size
        self.position: dict[tuple[str, int], int] = {key: i for i, key in enumerate(order)}
        extra = len(order)
        prompts: list[tuple[int, str, list[int]]] = []
        for c in calls:
            key = (c.workflow, c.call)
            pos = self.position.get(key)
            if pos is None:       # not admitted in the reference replay: place it after everything
                pos = self.position[key] = extra
                extra += 1
            prompts.append((pos, c.tenant, c.hash_ids[:c.input_length // block_size]))
        prompts.sort(key=lambda p: p[0])
        uses: dict[tuple[str, int], list[int]] = {}
        for pos, tenant, hashes in prompts:
            for h in hashes:
                lst = uses.get((tenant, h))
                if lst is None:
                    uses[(tenant, h)] = [pos]
                elif lst[-1] != pos:
                    lst.append(pos)
        for lst in uses.values():
            lst.reverse()         # descending: the next use is at the end, consumed by pop()
        self.uses = uses

    def next_use(self, tenant: str, hash_id: int) -> float:
        lst = self.uses.get((tenant, hash_id))
        return lst[-1] if lst else NEVER

    def consume(self, workflow: str, index: int, tenant: str, hash_ids: list[int], n_full: int) -> bool:
        """The call was admitted: its prompt blocks' next use moves past it. False if already done."""
        pos = self.position.pop((workflow, index), None)
        if pos is None:
            return False
        uses = self.uses
        for i in range(n_full):
            lst = uses.get((tenant, hash_ids[i]))
            if not lst:
                continue
            if lst[-1] == pos:
                lst.pop()
            elif pos in lst:      # admitted out of reference order
                lst.remove(pos)
            if not lst:
                del uses[(tenant, hash_ids[i])]
        return True


class OraclePolicy(Policy):
    name = "oracle"
    description = ("clairvoyant eviction (next use from the trace) under the simulator's own memory "
                   "accounting (in-simulator bound)")
    wants_events = True
    safety_net = False        # a bound: never second-guessed by the runtime's LRU net

    def __init__(self, future: FutureUses | None = None, seed: int = 0) -> None:
        super().__init__(seed)
        if future is None:
            raise AgentrtError("'oracle' is a bound that knows the trace's future: it runs only in "
                               "`agentrt bench` with the simulator, not in a live engine")
        self.future = future

    def observe(self, e) -> None:
        t = type(e)
        if t is ev.CallAdmitted or t is ev.CallFinished:
            info = e.call
            if info.warmup:
                return
            done = self.future.consume(info.workflow, info.index, info.tenant, info.hash_ids, info.n_full)
            if done and t is ev.CallFinished:
                # a call served without the cache (too large for the pool) is never admitted to
                # it: its uses go at its finish, and blocks it would have read are re-ranked
                self.epoch += 1

    def score(self, block):
        nxt = self.future.next_use(block.tenant, block.hash)
        if nxt == NEVER:
            return (-NEVER, block.last_touch)
        return (-nxt, 0)

    def state_bytes(self) -> int:
        return 120 * len(self.future.uses) + 80 * len(self.future.position)

"""A call inside the engine: its progress through admission, loading, prefill and decode."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentrt.cache.lease import Lease
    from agentrt.runtime.events import CallInfo
    from agentrt.trace.schema import Call

WAITING, LOADING, PREFILL, DECODE, DONE = range(5)


class Request:
    __slots__ = ("info", "call", "arrival", "lease", "state", "ready_at", "prefill_left",
                 "context", "output_left", "extra_blocks", "oversize", "hit_tokens")

    def __init__(self, info: "CallInfo", call: "Call | None", arrival: float, extra_blocks: int) -> None:
        self.info = info
        self.call = call                 # the trace call (None for a runtime warm-up)
        self.arrival = arrival
        self.lease: Lease | None = None
        self.state = WAITING
        self.ready_at = arrival          # when host->GPU loads of its prefix are done
        self.prefill_left = info.input_length
        self.context = 0                 # tokens already in its KV (cached + computed)
        self.output_left = info.output_length
        self.extra_blocks = extra_blocks  # partial prompt block + output blocks to reserve
        self.oversize = False
        self.hit_tokens = 0

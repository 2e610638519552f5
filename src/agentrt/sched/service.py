"""Attained service per workflow: the work each workflow's calls have taken from the engine so far.

Work is counted in tokens the engine computed: a call's uncached prompt tokens when it is
admitted (its prefill; cached blocks are free) and its output tokens when it finishes. Tokens
rather than seconds keep the measure independent of the batch a call happened to share.
Warm-ups are the runtime's own work and count for no workflow. A workflow's entry is dropped when
it ends, so the table holds live workflows only.
"""

from __future__ import annotations

from agentrt.runtime import events as ev


def prefill_work(call: ev.CallInfo, gpu_hit: int, host_hit: int, remote_hit: int = 0) -> int:
    """Prompt tokens a call computes given its cached prefix, local or copied from a peer (vLLM
    computes at least one)."""
    return max(1, call.input_length - (gpu_hit + host_hit + remote_hit) * call.block_size)


class AttainedService:
    __slots__ = ("work", "ended")

    def __init__(self) -> None:
        self.work: dict[tuple[str, str], int] = {}
        self.ended: tuple[tuple[str, str], int] | None = None   # the latest ended workflow's total

    def of(self, call: ev.CallInfo) -> int:
        return self.work.get((call.tenant, call.workflow), 0)

    def observe(self, e) -> None:
        t = type(e)
        if t is ev.CallAdmitted:
            c = e.call
            if not c.warmup and not c.extra.get("resumed"):
                k = (c.tenant, c.workflow)
                self.work[k] = self.work.get(k, 0) + prefill_work(c, e.gpu_hit, e.host_hit, e.remote_hit)
        elif t is ev.CallFinished:
            c = e.call
            if not c.warmup:
                k = (c.tenant, c.workflow)
                self.work[k] = self.work.get(k, 0) + c.output_length
        elif t is ev.WorkflowEnded:
            k = (e.tenant, e.workflow)
            total = self.work.pop(k, None)
            self.ended = (k, total) if total is not None else None

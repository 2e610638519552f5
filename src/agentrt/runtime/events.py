"""Typed events the runtime layer observes, with agent identity as their shared coordinate.

Engines (the simulator, the vLLM connector, the server) emit these; policies consume them through
`observe(event)`. Every event carries `now` in seconds: time is passed in, never read. A `CallInfo`
is created once per call and shared by all of its events; `agent` may be filled in by the
runtime's identity inference when the caller sent none.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Union

if TYPE_CHECKING:
    from agentrt.cache.block import Block


@dataclass(slots=True, eq=False)
class CallInfo:
    """Identity and shape of one LLM call, as the runtime sees it."""

    rid: int                     # engine-wide request id
    workflow: str
    agent: str | None
    tenant: str
    index: int                   # call index within the workflow
    hash_ids: list[int]
    input_length: int
    output_length: int
    block_size: int
    signal: list[float] | None = None
    warmup: bool = False         # a runtime-issued warm-up, never a user call
    agent_explicit: bool = True  # False when the agent was inferred from the prompt's anchor
    extra: dict = field(default_factory=dict)

    @property
    def n_full(self) -> int:
        return self.input_length // self.block_size

    @property
    def key(self) -> tuple[str, str]:
        """The workflow's key in the runtime: workflow ids are unique only within a tenant."""
        return (self.tenant, self.workflow)


@dataclass(slots=True)
class CallArrived:
    now: float
    call: CallInfo


@dataclass(slots=True)
class CallAdmitted:
    """The call got its cached prefix: `gpu_hit` + `host_hit` blocks touched, ending at `node`;
    `remote_hit` more copied from a peer replica (a simulated cluster with peer transfer), in the
    tree once its prompt is cached."""
    now: float
    call: CallInfo
    node: "Block"
    gpu_hit: int
    host_hit: int
    remote_hit: int = 0


@dataclass(slots=True)
class PromptCached:
    """The call's computed prompt blocks were inserted; `node` is its deepest prompt block."""
    now: float
    call: CallInfo
    node: "Block"
    inserted: int


@dataclass(slots=True)
class CallFinished:
    """The call finished; `node` is its deepest cached block (prompt or output)."""
    now: float
    call: CallInfo
    node: "Block | None"
    tool_call: bool = False      # the call ended in a tool call (its successor waits on a tool)
    tool_expected_s: float | None = None   # the framework's estimate of that tool's duration, if given


@dataclass(slots=True)
class BlocksEvicted:
    """Blocks left the GPU: demoted to the host tier when `demoted`, else dropped."""
    now: float
    blocks: list
    demoted: bool


@dataclass(slots=True)
class WorkflowEnded:
    """The workflow is over. `reason`: "end" (its framework or the engine said so), "silent"
    (the runtime's silence sweep) or "cap" (the runtime ended it, idle, to stay within its caps
    on open workflows; a later call of the same id opens it afresh)."""
    now: float
    workflow: str
    tenant: str
    reason: str = "end"

    @property
    def key(self) -> tuple[str, str]:
        """(tenant, workflow): the runtime ends only that tenant's workflow of this id."""
        return (self.tenant, self.workflow)


Event = Union[CallArrived, CallAdmitted, PromptCached, CallFinished, BlocksEvicted, WorkflowEnded]

"""Plain data of a workflow trace (../shared/TRACE_FORMAT.md, version 1).

A `Call` is one LLM call of one workflow with every default already resolved by the reader, so
the rest of the project never re-derives a default. `last` is `None` only when the reader cannot
know it yet (a streamed workflow trace without explicit `last` flags); the replay then ends the
workflow when the file ends.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agentrt.trace.limits import GENERATED_PREFIX, MAX_CONCURRENCY, MAX_TOKENS

TRACE_VERSION = "workflow-trace/1"
MOONCAKE_BLOCK_SIZE = 512


@dataclass(slots=True)
class TraceHeader:
    """The optional first line of a trace; a Mooncake trace has none (block size 512)."""

    block_size: int = MOONCAKE_BLOCK_SIZE
    name: str | None = None
    description: str | None = None
    source: str | None = None
    license: str | None = None
    concurrency: int | None = None   # agentrt extension: replay closed loop with this many workflows
    has_header: bool = False

    def __post_init__(self) -> None:
        # the reader's bounds (trace/limits.py): a trace written must read back
        if not 0 < self.block_size <= MAX_TOKENS:
            raise ValueError(f"block_size must be in 1..{MAX_TOKENS:,}, got {self.block_size}")
        if self.concurrency is not None and not 0 < self.concurrency <= MAX_CONCURRENCY:
            raise ValueError(f"concurrency must be in 1..{MAX_CONCURRENCY:,}, got {self.concurrency}")

    def to_json(self) -> dict:
        out: dict = {"trace": TRACE_VERSION, "block_size": self.block_size}
        for key in ("name", "description", "source", "license"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        if self.concurrency is not None:
            out["concurrency"] = self.concurrency
        return out


@dataclass(slots=True)
class Call:
    """One LLM call, defaults resolved. Times are milliseconds as in the file."""

    workflow: str
    call: int
    input_length: int
    output_length: int
    hash_ids: list[int]
    agent: str | None = None
    timestamp: float | None = None
    after: tuple[int, ...] = ()
    think_ms: float = 0.0
    output_hash_ids: list[int] = field(default_factory=list)
    last: bool | None = None
    tenant: str = "default"
    signal: list[float] | None = None
    line: int = 0

    def full_blocks(self, block_size: int) -> int:
        """Prompt blocks that engines can cache (the partial last block is not cached)."""
        return self.input_length // block_size

    def to_json(self, *, explicit_workflow: bool = True) -> dict:
        """The call as a trace line; fields at their default are left out, and so is a workflow id
        the reader generated for a line without one (`limits.generated_id`)."""
        out: dict = {}
        if explicit_workflow and not self.workflow.startswith(GENERATED_PREFIX):
            out["workflow"] = self.workflow
        if self.agent is not None:
            out["agent"] = self.agent
        out["call"] = self.call
        if self.timestamp is not None:
            out["timestamp"] = self.timestamp
        default_after = (self.call - 1,) if self.call > 0 else ()
        if tuple(self.after) != default_after:
            out["after"] = list(self.after)
        if self.think_ms:
            out["think_ms"] = self.think_ms
        out["input_length"] = self.input_length
        out["output_length"] = self.output_length
        out["hash_ids"] = self.hash_ids
        if self.output_hash_ids:
            out["output_hash_ids"] = self.output_hash_ids
        if self.last:
            out["last"] = True
        if self.tenant != "default":
            out["tenant"] = self.tenant
        if self.signal is not None:
            out["signal"] = self.signal
        return out

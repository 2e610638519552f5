"""Workflow traces: schema, streaming reader/validator, writer."""

from agentrt.trace.reader import TraceReader, read_trace
from agentrt.trace.schema import TRACE_VERSION, Call, TraceHeader
from agentrt.trace.writer import TraceWriter, write_trace

__all__ = ["Call", "TraceHeader", "TraceReader", "TraceWriter", "TRACE_VERSION", "read_trace", "write_trace"]

"""agentrt: an agent runtime layer for LLM serving.

It sits between an agent framework and a serving engine, knows agent identity and workflow
lifecycles, and serves agent-aware KV-cache policies through four primitives: observe, score,
predict and act. The same policy runs in the trace-driven simulator, inside vLLM and behind the
OpenAI-compatible server.
"""

__version__ = "0.1.0"

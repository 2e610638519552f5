"""agentrt: an agent runtime layer for LLM serving.

It sits between an agent framework and a serving engine, knows agent identity and workflow
lifecycles, and serves agent-aware KV-cache policies through four primitives: observe, score,
predict and act. The same policy runs in the trace-driven simulator, inside vLLM and behind the
OpenAI-compatible server.

From Python: `agentrt.simulate(...)` (see `agentrt.api`, docs/api.md). It is imported on first
use, so `import agentrt` stays light.
"""

__version__ = "0.1.0"
__all__ = ["simulate", "compare", "SimResult", "__version__"]

_API = ("simulate", "compare", "SimResult")


def __getattr__(name: str):
    if name in _API:
        from agentrt import api
        return getattr(api, name)
    raise AttributeError(f"module 'agentrt' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_API))

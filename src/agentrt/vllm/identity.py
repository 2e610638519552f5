"""Agent and workflow identity of one vLLM request, read from what the OpenAI API lets a client send.

Sources, first match wins (field names are the contract with `agentrt serve` and with users; they
are documented in docs/vllm.md):
- `vllm_xargs` (request body; reaches `request.sampling_params.extra_args`):
    agentrt_workflow   workflow run id (str)
    agentrt_agent      agent role (str)
    agentrt_tenant     isolation domain (str, default "default")
    agentrt_call       call index within the workflow (int, default: counted by the connector)
    agentrt_end        this call is the workflow's last: it ends when the call finishes (bool)
    agentrt_tool_call  the call ends in a tool call; its successor waits on the tool (bool)
    agentrt_warmup     a runtime-issued warm-up (`agentrt serve` sends these): the runtime
                       never learns from it (bool)
- `session_id` (request body): the workflow id when `agentrt_workflow` is absent.
- Neither: the request is a workflow of its own (`req:<request id>`) that ends when it finishes,
  and the runtime infers the agent from the prompt's anchor (its system prompt's blocks).
vLLM passes `vllm_xargs` values as str, int, float or lists of them; booleans may arrive as
`true`, `1` or `"true"`, and all of these are accepted.
"""

from __future__ import annotations

from dataclasses import dataclass

WORKFLOW = "agentrt_workflow"
AGENT = "agentrt_agent"
TENANT = "agentrt_tenant"
CALL = "agentrt_call"
END = "agentrt_end"
TOOL_CALL = "agentrt_tool_call"
WARMUP = "agentrt_warmup"
FIELDS = (WORKFLOW, AGENT, TENANT, CALL, END, TOOL_CALL, WARMUP)


@dataclass(slots=True)
class Identity:
    workflow: str
    agent: str | None
    tenant: str
    call: int | None
    end: bool            # the workflow ends when this call finishes
    tool_call: bool
    explicit: bool       # the workflow came from the client (xargs or session_id)
    warmup: bool = False


def truthy(v) -> bool:
    if isinstance(v, str):
        return v.strip().lower() in ("1", "true", "yes", "on")
    return bool(v)


def _int_or_none(v) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def identity_of(request_id: str, extra_args: dict | None, session_id: str | None) -> Identity:
    """The identity of one request; never raises on odd field values (they are ignored)."""
    x = extra_args or {}
    wf = x.get(WORKFLOW)
    if wf is None or wf == "":
        wf = session_id or None
    agent = x.get(AGENT)
    tenant = x.get(TENANT)
    explicit = wf is not None
    return Identity(
        workflow=str(wf) if explicit else f"req:{request_id}",
        agent=str(agent) if agent not in (None, "") else None,
        tenant=str(tenant) if tenant not in (None, "") else "default",
        call=_int_or_none(x.get(CALL)),
        end=truthy(x.get(END, False)) if explicit else True,
        tool_call=truthy(x.get(TOOL_CALL, False)),
        explicit=explicit,
        warmup=truthy(x.get(WARMUP, False)),
    )


def request_identity(request) -> Identity:
    """`identity_of` for a `vllm.v1.request.Request`."""
    sp = getattr(request, "sampling_params", None)
    xargs = getattr(sp, "extra_args", None) if sp is not None else None
    return identity_of(request.request_id, xargs if isinstance(xargs, dict) else None,
                       getattr(request, "session_id", None))


def xargs_for(workflow: str | None = None, agent: str | None = None, tenant: str | None = None,
              call: int | None = None, end: bool = False, tool_call: bool = False) -> dict:
    """The `vllm_xargs` a client sends for one call (only the fields it knows)."""
    out: dict = {}
    if workflow is not None:
        out[WORKFLOW] = workflow
    if agent is not None:
        out[AGENT] = agent
    if tenant is not None and tenant != "default":
        out[TENANT] = tenant
    if call is not None:
        out[CALL] = call
    if end:
        out[END] = 1
    if tool_call:
        out[TOOL_CALL] = 1
    return out

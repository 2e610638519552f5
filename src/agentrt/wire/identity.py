"""Agent and workflow identity of one vLLM request, from what vLLM carries on the request.

Sources, for each field the first that gives it (docs/vllm.md, "Identity: session_id and
kv_hints"; the field names are the contract with `agentrt serve`, orchestrators and users):
1. agentrt actions in vLLM's `kv_hints` envelope (`kvhints.py`): `agentrt.identity` gives the
   workflow, agent, tenant, thread and call index; `agentrt.workflow_end`, `agentrt.tool_call`,
   `agentrt.warmup` set those flags;
2. vLLM's own `session_id` (`Request.session_id`: the request body's `session_id`, else the
   `X-Session-ID` header, else `vllm_xargs.session_id`): the workflow;
3. agentrt's `vllm_xargs` (request body; they reach `request.sampling_params.extra_args`), the
   fallback:
    agentrt_workflow   workflow run id (str)
    agentrt_agent      agent role (str)
    agentrt_tenant     isolation domain (str, default "default")
    agentrt_call       call index within the workflow (int, default: counted by the connector)
    agentrt_end        this call is the workflow's last: it ends when the call finishes (bool)
    agentrt_tool_call  the call ends in a tool call; its successor waits on the tool (bool)
    agentrt_warmup     a runtime-issued warm-up (`agentrt serve` sends these): the runtime
                       never learns from it (bool)
A flag is set when the kv_hints action is present, else as `vllm_xargs` says.
None of them: the request is a workflow of its own (`req:<request id>`) that ends when it
finishes, and the runtime infers the agent from the prompt's anchor (its system prompt's blocks).
All of it is untrusted input and never raises: ids are printable strings of at most 512
characters (vllm_xargs numbers are taken as their text), tenants 1-64 characters of
`[A-Za-z0-9._-]`, call indexes non-negative ints; anything else is ignored and counted.
vLLM passes `vllm_xargs` values as str, int, float or lists of them; booleans may arrive as
`true`, `1` or `"true"`, and all of these are accepted.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentrt.wire import kvhints
from agentrt.wire.kvhints import HintCounts, Hints, clean_id

WORKFLOW = "agentrt_workflow"
AGENT = "agentrt_agent"
TENANT = "agentrt_tenant"
CALL = "agentrt_call"
END = "agentrt_end"
TOOL_CALL = "agentrt_tool_call"
WARMUP = "agentrt_warmup"
FIELDS = (WORKFLOW, AGENT, TENANT, CALL, END, TOOL_CALL, WARMUP)
_NO_HINTS = Hints()


@dataclass(slots=True)
class Identity:
    workflow: str
    agent: str | None
    tenant: str
    call: int | None
    end: bool            # the workflow ends when this call finishes
    tool_call: bool
    explicit: bool       # the workflow came from the client (kv_hints, session_id or xargs)
    warmup: bool = False
    thread: str | None = None
    tool_expected_s: float | None = None
    source: str = "none"     # where the workflow came from: kv_hints | session_id | vllm_xargs | none


def truthy(v) -> bool:
    if isinstance(v, str):
        return v.strip().lower() in ("1", "true", "yes", "on")
    return isinstance(v, (bool, int, float)) and bool(v)


def _xarg_id(x: dict, key: str, c: HintCounts) -> str | None:
    v = x.get(key)
    if v is None or v == "":
        return None
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        v = str(v)
    out = clean_id(v)
    if out is None:
        c.bad_fields += 1
    return out


def _xarg_tenant(x: dict, c: HintCounts) -> str | None:
    v = x.get(TENANT)
    if v is None or v == "":
        return None
    if isinstance(v, str) and kvhints.TENANT_RE.fullmatch(v):
        return v
    c.bad_fields += 1
    return None


def _xarg_call(x: dict, c: HintCounts) -> int | None:
    v = x.get(CALL)
    if v is None:
        return None
    try:
        n = int(v) if not isinstance(v, (bool, float)) else None
    except (TypeError, ValueError):
        n = None
    if n is None or not 0 <= n < 2**31:
        c.bad_fields += 1
        return None
    return n


def identity_of(request_id: str, extra_args: dict | None, session_id: str | None,
                hints: Hints | None = None, counts: HintCounts | None = None) -> Identity:
    """The identity of one request from its parsed kv_hints, session_id and vllm_xargs."""
    x = extra_args if isinstance(extra_args, dict) else {}
    h = hints or _NO_HINTS
    c = counts if counts is not None else HintCounts()
    wf, source = h.workflow, "kv_hints"
    if wf is None:
        wf, source = clean_id(session_id), "session_id"
        if wf is None and session_id not in (None, ""):
            c.bad_fields += 1            # vLLM passes any string on: the same limits apply
    if wf is None:
        wf, source = _xarg_id(x, WORKFLOW, c), "vllm_xargs"
    explicit = wf is not None
    agent = h.agent if h.agent is not None else _xarg_id(x, AGENT, c)
    tenant = h.tenant if h.tenant is not None else _xarg_tenant(x, c)
    call = h.call if h.call is not None else _xarg_call(x, c)
    return Identity(
        workflow=wf if explicit else f"req:{request_id}",
        agent=agent,
        tenant=tenant or "default",
        call=call,
        end=(h.end or truthy(x.get(END, False))) if explicit else True,
        tool_call=h.tool_call or truthy(x.get(TOOL_CALL, False)),
        explicit=explicit,
        warmup=h.warmup or truthy(x.get(WARMUP, False)),
        thread=h.thread,
        tool_expected_s=h.tool_expected_s,
        source=source if explicit else "none",
    )


def request_identity(request, counts: HintCounts | None = None) -> tuple[Identity, Hints]:
    """`identity_of` for a `vllm.v1.request.Request`, with what its kv_hints said."""
    hints = kvhints.parse(kvhints.carriers(request), counts)
    sp = getattr(request, "sampling_params", None)
    xargs = getattr(sp, "extra_args", None) if sp is not None else None
    ident = identity_of(request.request_id, xargs if isinstance(xargs, dict) else None,
                        getattr(request, "session_id", None), hints, counts)
    return ident, hints


def refused_by_connector(workflow: str | None, agent: str | None, tenant: str | None) -> tuple[str, str] | None:
    """(field, why) for the first identity field of a call the connector would drop (`xargs_for`'s
    values read by the rules above), else None. A client checks before it replays: a dropped
    tenant falls back to `default` and a dropped id loses the workflow's structure, silently.
    Workflow ids the trace reader made up for unnamed lines are sent as they are and read back
    as `line-N`, so they pass."""
    if tenant is not None and tenant != "default" and not kvhints.TENANT_RE.fullmatch(tenant):
        return "tenant", (f"the vLLM connector names tenants by {kvhints.TENANT_RE.pattern} "
                          f"(as agentrt serve does), got {tenant[:80]!r}")
    for field, v in (("workflow", workflow), ("agent", agent)):
        if v is not None and clean_id(v) is None:
            return field, (f"the vLLM connector takes printable ids of at most {kvhints.MAX_ID_CHARS} "
                           f"characters, got {len(v):,} characters")
    return None


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

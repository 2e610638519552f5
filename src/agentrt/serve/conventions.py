"""Where each convention puts a call's workflow, and the order they are read in.

Clients arrive speaking different dialects for the same thing (one agent run = one agentrt
workflow). Each source below is (convention, where, key); for each field the first source that
holds a non-empty value wins, and only that value is checked (a later, unused one cannot fail a
request). Tenancy is not here: the tenant comes from the API key under `--auth`, else from
`X-Tenant-Id` / `metadata.tenant_id` (identity.py), and every workflow below is scoped to it.

workflow (the agent run):
  1. agentrt      header `X-Workflow-Id`, then `metadata.workflow_id`
  2. vLLM         body `session_id`, header `X-Session-ID`, `vllm_xargs.session_id` (vLLM's order)
  3. Dynamo       `nvext.agent_context.session_id`, header `X-Dynamo-Session-ID`
  4. Claude Code  header `x-claude-code-session-id`
  5. llm-d        header `x-session-affinity`, header `session-id`
thread (one agent instance inside the run; forwarded as `agentrt.identity`'s `thread`):
  Dynamo `nvext.agent_context.trajectory_id`, Claude Code `x-claude-code-agent-id` (a subagent)
workflow end (beside agentrt's `X-Workflow-End` / `metadata.workflow_end`, which always apply):
  Dynamo `nvext.agent_context.trajectory_final` or `session_final` (true), header
  `X-Dynamo-Session-Final` (true): the session's close. They end the workflow only when it did
  not come from agentrt's own header or metadata (those end with `X-Workflow-End`), and only for
  a root: an agent context with `parent_trajectory_id` / `parent_session_id`, or a request with
  `X-Dynamo-Parent-Session-ID`, is a subagent whose end is not the run's (as Dynamo's own
  session policy reads it).
Parent ids are otherwise not used: a Dynamo subagent that sends its own session id is a workflow
of its own (Dynamo's sessions are reasoning chains); a Claude Code subagent stays in its
session's workflow as a thread.
"""

from __future__ import annotations

AGENTRT, VLLM, DYNAMO, CLAUDE, LLMD = "agentrt", "vllm", "dynamo", "claude_code", "llm-d"

WORKFLOW = (
    (AGENTRT, "header", "x-workflow-id"), (AGENTRT, "metadata", "workflow_id"),
    (VLLM, "body", "session_id"), (VLLM, "header", "x-session-id"), (VLLM, "xargs", "session_id"),
    (DYNAMO, "nvext", "session_id"), (DYNAMO, "header", "x-dynamo-session-id"),
    (CLAUDE, "header", "x-claude-code-session-id"),
    (LLMD, "header", "x-session-affinity"), (LLMD, "header", "session-id"),
)
THREAD = ((DYNAMO, "nvext", "trajectory_id"), (CLAUDE, "header", "x-claude-code-agent-id"))
FINAL = (("nvext", "trajectory_final"), ("nvext", "session_final"), ("header", "x-dynamo-session-final"))
PARENT = (("nvext", "parent_trajectory_id"), ("nvext", "parent_session_id"),
          ("header", "x-dynamo-parent-session-id"))
# every identity header (lower case): each may come once (proxy.py), none is forwarded (headers.py)
AGENTRT_HEADERS = ("x-agent-id", "x-workflow-id", "x-workflow-end", "x-tenant-id")
HEADERS = tuple(dict.fromkeys(
    AGENTRT_HEADERS + tuple(k for _, w, k in WORKFLOW + THREAD if w == "header")
    + tuple(k for w, k in FINAL + PARENT if w == "header")))


def shown(where: str, key: str) -> str:
    """The field's name as a client wrote it, for errors."""
    return {"header": key, "metadata": f"metadata.{key}", "body": key, "xargs": f"vllm_xargs.{key}",
            "nvext": f"nvext.agent_context.{key}"}[where]


def lookup(where: str, key: str, headers, meta: dict, body: dict, ctx: dict):
    """The raw value of one source (None: absent). `vllm_xargs.session_id` counts only as a
    string, as vLLM reads it."""
    if where == "header":
        return headers.get(key)
    if where == "metadata":
        return meta.get(key)
    if where == "nvext":
        return ctx.get(key)
    if where == "body":
        return body.get(key)
    xargs = body.get("vllm_xargs")
    v = xargs.get(key) if isinstance(xargs, dict) else None
    return v if isinstance(v, str) else None


def agent_context(body: dict) -> dict:
    """Dynamo's `nvext.agent_context` object ({} when absent); ValueError naming the field when
    `nvext` or `agent_context` is there but not an object."""
    nvext = body.get("nvext")
    if nvext is None:
        return {}
    if not isinstance(nvext, dict):
        raise ValueError("nvext")
    ctx = nvext.get("agent_context")
    if ctx is None:
        return {}
    if not isinstance(ctx, dict):
        raise ValueError("nvext.agent_context")
    return ctx

"""Agent identity of a request: from headers, body metadata, other conventions, or inferred; and
how it is forwarded.

Sources, first found wins:
- agent: header `X-Agent-Id`, else `metadata.agent_id`; else left to the runtime, which infers
  `anchor:<id>` from the prompt's leading block (see `blocks.py`);
- workflow: the conventions of `conventions.py` in their order (agentrt's `X-Workflow-Id` /
  `metadata.workflow_id`, vLLM's session id, Dynamo's `nvext.agent_context.session_id` /
  `X-Dynamo-Session-ID`, Claude Code's `x-claude-code-session-id`, llm-d's
  `x-session-affinity` / `session-id`), else `auto:<digest>` of the first non-system message of
  a chat (the task every call of one conversation repeats), else `call:<n>` (one call, one
  workflow, ended with that call); the thread (agent instance) from Dynamo's `trajectory_id` or
  Claude Code's agent id;
- workflow end: `X-Workflow-End` / `metadata.workflow_end` (true on a workflow's last call), or a
  root Dynamo session's close (`trajectory_final`, `session_final`, `X-Dynamo-Session-Final`);
- tenant: `X-Tenant-Id` / `metadata.tenant_id`, default "default"; with `--auth` it is the API
  key's and the header and metadata are ignored (`auth.py`).
`metadata` values are strings, as OpenAI's `metadata` requires (`workflow_end` may also be a JSON
boolean). Only the value that wins is checked: a printable string of at most `MAX_ID_CHARS`
characters (the connector's limit, `wire/kvhints.py`), tenants `TENANT_RE`; a bad one is a 400
naming the field, and so is a workflow key over the limit with its tenant's prefix.
Every workflow is keyed by its tenant (`Identity.key`, `auth.tenant_scoped`), whatever convention
named it: the runtime, the scheduler and the engine see `tenant/workflow` (the default tenant's
ids stay as they are), so two tenants' `run-42` are two workflows, and no header or body field
reaches another tenant's. Forwarding (`forward_body`): `session_id` = the workflow key (a
client's own `session_id`, scoped the same way, when it set one), `cache_salt` = the tenant's
salt, `kv_transfer_params` = `{"kv_hints": envelope}` with the agentrt actions (identity with the
workflow key, agent, tenant, thread and call; workflow end; warm-up), the server's `kv.retain`
for a call that may end in a tool call (`Identity.retain_s`, `--retain-tool-calls`) and the
client's own `kv_hints` actions (only `kv.retain` and `vllm.set_priority`, checked by
`validate.py`; the connector charges them to the tenant named here), and `vllm_xargs` gains
`agentrt_workflow` (the key), `agentrt_agent`, `agentrt_tenant`, `agentrt_end` ("true"/"false")
and `agentrt_call` (the call's index in its workflow, as the server counts), merged over the
client's own (which may not hold `agentrt_*` fields, and loses `session_id`: consumed above). The
connector reads kv_hints first, the xargs are its fallback (src/agentrt/wire/identity.py). The
envelope travels in `kv_transfer_params` because vLLM 0.32.0's OpenAI server has no `kv_hints`
field; clients may not send `kv_transfer_params` (`validate.py`).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass

from agentrt.runtime.floor import TOOL_PRIORITY
from agentrt.serve import conventions
from agentrt.serve.auth import tenant_scoped
from agentrt.serve.validate import RequestError
from agentrt.wire import kvhints, stdhints
from agentrt.wire.kvhints import MAX_ID_CHARS, TENANT_RE

HEADERS = {"agent": "x-agent-id", "end": "x-workflow-end", "tenant": "x-tenant-id"}
METADATA = {"agent": "agent_id", "end": "workflow_end", "tenant": "tenant_id"}
IDENTITY_HEADERS = conventions.HEADERS     # every header identity is read from (lower case)
TRUE = ("true", "1", "yes")
FALSE = ("false", "0", "no", "")


@dataclass(slots=True)
class Identity:
    agent: str | None            # None: the runtime infers it from the prompt's anchor
    workflow: str
    tenant: str = "default"
    end: bool = False            # this is the workflow's last call
    agent_source: str = "anchor"     # header | metadata | anchor
    # header | metadata (agentrt's) | session_id (vLLM's) | dynamo | claude_code | llm-d | auto | call
    workflow_source: str = "call"
    key: str = ""                    # the workflow's tenant-scoped key (set by resolve_identity)
    thread: str | None = None        # the agent instance within the workflow (conventions.THREAD)
    retain_s: float | None = None    # send kv.retain for the call's context for this long (serve)

    def __post_init__(self) -> None:
        if not self.key and self.workflow:
            self.key = tenant_scoped(self.tenant, self.workflow)


def _clean(value, name: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise RequestError(f"{name} must be a string", name)
    value = value.strip()
    if len(value) > MAX_ID_CHARS:
        raise RequestError(f"{name} is longer than {MAX_ID_CHARS} characters", name)
    if not value.isprintable():
        raise RequestError(f"{name} must be printable text (no control characters)", name)
    return value or None


def _flag(value, name: str) -> bool:
    if value is None or isinstance(value, bool):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in TRUE + FALSE:
        return value.strip().lower() in TRUE
    raise RequestError(f"{name} must be true or false", name)


def _first_task(messages: list) -> str | None:
    for m in messages:
        if isinstance(m, dict) and m.get("role") not in ("system", "developer"):
            text = json.dumps(m.get("content"), sort_keys=True, default=str)
            return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()
    return None


def _first(sources, headers, meta: dict, body: dict, ctx: dict) -> tuple[str | None, str, str]:
    """(value, convention, field name) of the first source holding a non-empty value."""
    for conv, where, key in sources:
        name = conventions.shown(where, key)
        v = _clean(conventions.lookup(where, key, headers, meta, body, ctx), name)
        if v:
            return v, conv, name
    return None, "", ""


def _session_end(headers, ctx: dict) -> bool:
    """A Dynamo session's close (`trajectory_final`, `session_final`, `X-Dynamo-Session-Final`)
    for a root session (no parent named)."""
    def get(where, key):
        return headers.get(key) if where == "header" else ctx.get(key)
    final = False
    for where, key in conventions.FINAL:
        final = _flag(get(where, key), conventions.shown(where, key)) or final
    return final and not any(get(w, k) not in (None, "") for w, k in conventions.PARENT)


def resolve_identity(headers, body: dict, call_number: int, tenant: str | None = None) -> Identity:
    """Identity of one request. `headers` is any case-insensitive mapping (lower-case keys work).
    `tenant`: the authenticated tenant, which overrides any the request names."""
    meta = body.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    try:
        ctx = conventions.agent_context(body)
    except ValueError as e:
        raise RequestError(f"'{e}' must be an object", str(e)) from None
    found: dict = {}
    source: dict = {}
    for key in HEADERS:
        h = headers.get(HEADERS[key])
        if h is not None:
            found[key], source[key] = h, "header"
        elif METADATA[key] in meta:
            found[key], source[key] = meta[METADATA[key]], "metadata"
    names = {k: (HEADERS[k] if source.get(k) == "header" else f"metadata.{METADATA[k]}") for k in HEADERS}
    agent = _clean(found.get("agent"), names["agent"])
    if tenant is None:
        tenant = _clean(found.get("tenant"), names["tenant"]) or "default"
        if not TENANT_RE.fullmatch(tenant):
            raise RequestError(f"{names['tenant']} must be 1-64 characters of [A-Za-z0-9._-]", names["tenant"])
    end = _flag(found.get("end"), names["end"])
    ident = Identity(agent, "", tenant, end, source.get("agent", "anchor") if agent else "anchor")
    workflow, conv, wname = _first(conventions.WORKFLOW, headers, meta, body, ctx)
    ident.thread = _first(conventions.THREAD, headers, meta, body, ctx)[0]
    if workflow:
        src = conv if conv != conventions.AGENTRT else "header" if wname == "x-workflow-id" else "metadata"
        ident.workflow, ident.workflow_source = workflow, "session_id" if conv == conventions.VLLM else src
        if conv != conventions.AGENTRT and _session_end(headers, ctx):
            ident.end = True
    else:
        task = _first_task(body["messages"]) if isinstance(body.get("messages"), list) else None
        if task is not None:
            ident.workflow, ident.workflow_source = f"auto:{task}", "auto"
        else:   # a workflow of one call: it ends with that call
            ident.workflow, ident.workflow_source, ident.end = f"call:{call_number}", "call", True
    ident.key = tenant_scoped(tenant, ident.workflow)
    # the engine's connector refuses longer keys: the call would lose its identity there unseen;
    # a client's own session id is forwarded (scoped) whichever source named the workflow
    sid = _clean(body.get("session_id"), "session_id")
    for value, name in ((ident.key, wname or "workflow"),
                        (tenant_scoped(tenant, sid) if isinstance(sid, str) and sid else "", "session_id")):
        if len(value) > MAX_ID_CHARS:
            raise RequestError(f"{name} is too long: with its tenant's prefix the workflow key has "
                               f"{len(value)} characters, over {MAX_ID_CHARS}", name)
    return ident


def forward_body(body: dict, ident: Identity, agent: str, call_index: int | None = None,
                 salt: str | None = None, warmup: bool = False) -> dict:
    """A shallow copy of `body` carrying the identity (and the tenant's `cache_salt`) for the
    engine and its KV connector, in both forms: kv_hints actions and vllm_xargs."""
    out = dict(body)
    sid = out.get("session_id")
    out["session_id"] = tenant_scoped(ident.tenant, sid) if isinstance(sid, str) and sid else ident.key
    if salt is not None:
        out["cache_salt"] = salt
    actions = kvhints.agentrt_actions(ident.key, agent, ident.tenant, call_index, ident.thread,
                                      end=ident.end, warmup=warmup)
    if ident.retain_s is not None:
        actions.append(kvhints.action(stdhints.RETAIN, {"scope": ident.key, "directives": [
            {"start": 0, "priority": TOOL_PRIORITY, "duration": ident.retain_s}]}, "retain"))
    client = out.pop("kv_hints", None)
    if client is not None:                    # checked by validate.py: standard actions only
        actions.extend(stdhints.check_client_envelope(client))
    out["kv_transfer_params"] = {"kv_hints": kvhints.envelope(actions, uuid.uuid4().hex)}
    xargs = out.get("vllm_xargs")
    xargs = {k: v for k, v in xargs.items() if not k.startswith("agentrt_") and k != "session_id"} \
        if isinstance(xargs, dict) else {}
    xargs.update(agentrt_workflow=ident.key, agentrt_agent=agent, agentrt_tenant=ident.tenant,
                 agentrt_end="true" if ident.end else "false")
    if call_index is not None:
        xargs["agentrt_call"] = call_index
    if warmup:
        xargs["agentrt_warmup"] = "true"
    out["vllm_xargs"] = xargs
    return out

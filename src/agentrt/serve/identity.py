"""Agent identity of a request: from headers, body metadata, or inferred; and how it is forwarded.

Sources, first found wins:
- headers `X-Agent-Id`, `X-Workflow-Id`, `X-Workflow-End` (true on a workflow's last call),
  `X-Tenant-Id`;
- the body's `metadata` object: `agent_id`, `workflow_id`, `workflow_end`, `tenant_id` (strings, as
  OpenAI's `metadata` requires; `workflow_end` may also be a JSON boolean);
- the workflow only: vLLM's own session id, where vLLM looks for it (the body's `session_id`,
  else the `X-Session-ID` header, else `vllm_xargs.session_id`), else `auto:<digest>` of the
  first non-system message of a chat (the task every call of one conversation repeats), else
  `call:<n>` (one call, one workflow, ended with that call). The agent, when not given, is left to the runtime, which infers `anchor:<id>`
  from the prompt's leading block (see `blocks.py`).
The tenant defaults to "default"; with `--auth` it is the API key's tenant and the header and
metadata are ignored (`auth.py`). Tenant names are 1-64 characters of `[A-Za-z0-9._-]`; other ids
are printable strings of at most 512 characters, and so is a workflow key with its tenant's
prefix (the connector's limit: a longer key would lose its identity in the engine).
Every workflow is keyed by its tenant (`Identity.key`, `auth.tenant_scoped`): the runtime, the
scheduler and the engine see `tenant/workflow` (the default tenant's ids stay as they are), so two
tenants' `run-42` are two workflows. Forwarding (`forward_body`): `session_id` = the workflow key
(a client's own `session_id`, scoped the same way, when it set one), `cache_salt` = the tenant's
salt, `kv_transfer_params` = `{"kv_hints": envelope}` with the agentrt actions (identity with the
workflow key, agent, tenant and call; workflow end; warm-up), and `vllm_xargs` gains
`agentrt_workflow` (the key), `agentrt_agent`, `agentrt_tenant`, `agentrt_end` ("true"/"false")
and `agentrt_call` (the call's index in its workflow, as the server counts), merged over the
client's own (which may not hold `agentrt_*` fields, and loses `session_id`: consumed above). The
connector reads kv_hints first, the xargs are its fallback (src/agentrt/vllm/identity.py). The
envelope travels in `kv_transfer_params` because vLLM 0.32.0's OpenAI server has no `kv_hints`
field; clients may send neither (`validate.py`), so every action is the server's own.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass

from agentrt.serve.auth import TENANT_RE, tenant_scoped
from agentrt.serve.validate import RequestError
from agentrt.vllm import kvhints

HEADERS = {"agent": "x-agent-id", "workflow": "x-workflow-id", "end": "x-workflow-end",
           "tenant": "x-tenant-id"}
METADATA = {"agent": "agent_id", "workflow": "workflow_id", "end": "workflow_end",
            "tenant": "tenant_id"}
SESSION_HEADER = "x-session-id"        # vLLM's own session header
MAX_ID_CHARS = 512
TRUE = ("true", "1", "yes")
FALSE = ("false", "0", "no", "")


@dataclass(slots=True)
class Identity:
    agent: str | None            # None: the runtime infers it from the prompt's anchor
    workflow: str
    tenant: str = "default"
    end: bool = False            # this is the workflow's last call
    agent_source: str = "anchor"     # header | metadata | anchor
    workflow_source: str = "call"    # header | metadata | session_id | auto | call
    key: str = ""                    # the workflow's tenant-scoped key (set by resolve_identity)

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


def _session_id(headers, body: dict) -> str | None:
    """vLLM's session id, looked up in vLLM's order (body, header, `vllm_xargs.session_id`)."""
    if body.get("session_id"):
        return _clean(body["session_id"], "session_id")
    if headers.get(SESSION_HEADER):
        return _clean(headers[SESSION_HEADER], SESSION_HEADER)
    xargs = body.get("vllm_xargs")
    sid = xargs.get("session_id") if isinstance(xargs, dict) else None
    if isinstance(sid, str) and sid:           # vLLM ignores any other type here; so do we
        return _clean(sid, "vllm_xargs.session_id")
    return None


def resolve_identity(headers, body: dict, call_number: int, tenant: str | None = None) -> Identity:
    """Identity of one request. `headers` is any case-insensitive mapping (lower-case keys work).
    `tenant`: the authenticated tenant, which overrides any the request names."""
    meta = body.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
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
    workflow = _clean(found.get("workflow"), names["workflow"])
    if tenant is None:
        tenant = _clean(found.get("tenant"), names["tenant"]) or "default"
        if not TENANT_RE.fullmatch(tenant):
            raise RequestError(f"{names['tenant']} must be 1-64 characters of [A-Za-z0-9._-]", names["tenant"])
    end = _flag(found.get("end"), names["end"])
    ident = Identity(agent, "", tenant, end, source.get("agent", "anchor") if agent else "anchor")
    session = _session_id(headers, body)
    if workflow:
        ident.workflow, ident.workflow_source = workflow, source["workflow"]
    elif session:
        ident.workflow, ident.workflow_source = session, "session_id"
    else:
        task = _first_task(body["messages"]) if isinstance(body.get("messages"), list) else None
        if task is not None:
            ident.workflow, ident.workflow_source = f"auto:{task}", "auto"
        else:   # a workflow of one call: it ends with that call
            ident.workflow, ident.workflow_source, ident.end = f"call:{call_number}", "call", True
    ident.key = tenant_scoped(tenant, ident.workflow)
    # the engine's connector refuses longer keys: the call would lose its identity there unseen
    for value, name in ((ident.key, names["workflow"] if workflow else "session_id"),
                        (tenant_scoped(tenant, session) if session else "", "session_id")):
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
    actions = kvhints.agentrt_actions(ident.key, agent, ident.tenant, call_index, end=ident.end,
                                      warmup=warmup)
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

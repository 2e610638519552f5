"""agentrt's actions in vLLM's versioned `kv_hints` envelope: building them, and reading them as
untrusted input.

The envelope is vLLM's (`vllm.v1.kv_hints.KvHintsEnvelope`, vLLM 0.32.0): `protocol_version`,
`message_id` and `actions`, each action `action_id`, `action_type`, `action_version` and a JSON
`payload`. vLLM carries it opaquely; each component reads the action types it owns. agentrt owns
the `agentrt.*` types, all at action version 1 (docs/vllm.md, "Identity: session_id and kv_hints"):

    agentrt.identity      {"workflow_id": str, "agent"?: str, "tenant"?: str, "thread"?: str,
                           "call"?: int}
    agentrt.workflow_end  {}   this call is its workflow's last
    agentrt.tool_call     {"expected_s"?: number}   the call ends in a tool call
    agentrt.warmup        {}   a runtime-issued warm-up: never learned from

Where an envelope comes from (`carriers`): `Request.kv_hints` (vLLM's own field, set through the
engine API: `AsyncLLM.generate(..., kv_hints=)`, `LLMEngine.add_request(..., kv_hints=)`), then
`kv_transfer_params["kv_hints"]` or `["kv_hint"]` (the HTTP route: vLLM 0.32.0's OpenAI server
has no `kv_hints` request field, while `kv_transfer_params` reaches the connector as
`Request.kv_transfer_params`; `kv_hint` is the key Dynamo's vLLM bridge uses).

The standard actions `kv.retain` and `vllm.set_priority` (vLLM's kv_hints work) are read by
`stdhints.py` into `Hints.retain` / `Hints.claims` (refusals in `Hints.refused`); the connector
executes them (`runtime/retention.py`). They are neither agentrt's nor foreign.

Reading never raises. Accepted: a dict or a msgspec struct with the fields above as strings, at
most `MAX_ACTIONS` actions read per envelope. `protocol_version` is only checked to be a short
string (vLLM defines no values; agentrt's meaning is versioned per action). An action version is
`MAJOR[.MINOR[.PATCH]]`; major 1 is read (a newer minor may add payload keys: unknown keys are
ignored), any other major is ignored. Every ignored thing is counted (`HintCounts`): another
component's action type (`foreign`, expected), an unknown `agentrt.*` type, an unknown version, a
malformed envelope or action (a payload breaking its schema drops the whole action), a second
action of a type already read (the first wins).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, fields

from agentrt.wire import stdhints

PROTOCOL_VERSION = "0.1"        # what agentrt emits; any short string is read
ACTION_VERSION = "1.0"          # what agentrt emits for each of its types
MAJOR = 1                       # the action major version this reader understands
PREFIX = "agentrt."
IDENTITY = "agentrt.identity"
WORKFLOW_END = "agentrt.workflow_end"
TOOL_CALL = "agentrt.tool_call"
WARMUP = "agentrt.warmup"
TRANSFER_KEYS = ("kv_hints", "kv_hint")     # keys of an envelope in kv_transfer_params
MAX_ACTIONS = 64
MAX_ID_CHARS = 512
MAX_EXPECTED_S = 86400.0 * 7
TENANT_RE = re.compile(r"[A-Za-z0-9._-]{1,64}")     # as `agentrt serve` names tenants
_VERSION_RE = re.compile(r"(\d{1,6})(?:\.\d{1,6}){0,2}")
_MAX_CALL = 2**31


@dataclass(slots=True)
class Hints:
    """What the agentrt actions of a request's envelopes say (None / False: not said)."""
    workflow: str | None = None
    agent: str | None = None
    tenant: str | None = None
    thread: str | None = None
    call: int | None = None
    end: bool = False
    tool_call: bool = False
    tool_expected_s: float | None = None
    warmup: bool = False
    actions: int = 0                                    # agentrt actions read
    ignored: list[str] = field(default_factory=list)    # why others were not (bounded)
    retain: stdhints.RetainHint | None = None           # kv.retain (all of an envelope's, joined)
    claims: list = field(default_factory=list)          # vllm.set_priority claims
    refused: list[str] = field(default_factory=list)    # why standard actions were refused
    retain_actions: int = 0


@dataclass(slots=True)
class HintCounts:
    """Totals over requests: what was read and what was ignored (see the module docstring)."""
    envelopes: int = 0
    actions: int = 0
    foreign: int = 0
    unknown_type: int = 0
    unknown_version: int = 0
    malformed: int = 0
    duplicate: int = 0
    bad_fields: int = 0         # session_id / vllm_xargs identity values ignored (identity.py)

    def as_dict(self, prefix: str = "hints_") -> dict:
        return {prefix + f.name: getattr(self, f.name) for f in fields(self)}


# ------------------------------------------------------------------ building (senders)
def action(action_type: str, payload: dict | None = None, action_id: str | None = None) -> dict:
    return {"action_id": action_id or action_type.removeprefix(PREFIX), "action_type": action_type,
            "action_version": ACTION_VERSION, "payload": dict(payload or {})}


def agentrt_actions(workflow: str | None = None, agent: str | None = None, tenant: str | None = None,
                    call: int | None = None, thread: str | None = None, end: bool = False,
                    tool_call: bool = False, expected_s: float | None = None,
                    warmup: bool = False) -> list[dict]:
    """The agentrt actions for one call (an identity action only when `workflow` is given)."""
    out = []
    if workflow is not None:
        p: dict = {"workflow_id": workflow}
        for k, v in (("agent", agent), ("tenant", tenant), ("thread", thread), ("call", call)):
            if v is not None:
                p[k] = v
        out.append(action(IDENTITY, p))
    if end:
        out.append(action(WORKFLOW_END))
    if tool_call:
        out.append(action(TOOL_CALL, {"expected_s": expected_s} if expected_s is not None else {}))
    if warmup:
        out.append(action(WARMUP))
    return out


def envelope(actions: list[dict], message_id: str) -> dict:
    """An envelope as JSON (for `kv_transfer_params["kv_hints"]`)."""
    return {"protocol_version": PROTOCOL_VERSION, "message_id": message_id, "actions": actions}


def vllm_envelope(env: dict):
    """`env` as vLLM's `KvHintsEnvelope`, for the engine API (`kv_hints=`). Imports vLLM."""
    from vllm.v1.kv_hints import KvHintAction, KvHintsEnvelope
    return KvHintsEnvelope(protocol_version=env["protocol_version"], message_id=env["message_id"],
                           actions=[KvHintAction(**a) for a in env["actions"]])


# ------------------------------------------------------------------ reading (the connector)
def carriers(request) -> list:
    """The envelopes a vLLM `Request` carries, in precedence order."""
    out = []
    native = getattr(request, "kv_hints", None)
    if native is not None:
        out.append(native)
    ktp = getattr(request, "kv_transfer_params", None)
    if isinstance(ktp, dict):
        for k in TRANSFER_KEYS:
            if ktp.get(k) is not None:
                out.append(ktp[k])
    return out


def parse(envelopes: Iterable, counts: HintCounts | None = None) -> Hints:
    """The agentrt actions of `envelopes` (earlier envelopes win). Never raises."""
    c = counts if counts is not None else HintCounts()
    out = Hints()
    seen: set[str] = set()
    for env in envelopes:
        c.envelopes += 1
        actions = _actions_of(env)
        if actions is None:
            _ignore(out, c, "malformed", "envelope")
            continue
        for a in actions[:MAX_ACTIONS]:
            _read_action(a, out, seen, c)
        if len(actions) > MAX_ACTIONS:
            _ignore(out, c, "malformed", f"envelope: over {MAX_ACTIONS} actions")
    return out


def _get(obj, name: str):
    if isinstance(obj, dict):
        return obj.get(name)
    if hasattr(type(obj), "__struct_fields__"):      # a msgspec struct (vLLM's types)
        return getattr(obj, name, None)
    return None


def _short_str(v, limit: int) -> bool:
    return isinstance(v, str) and len(v) <= limit


def _actions_of(env) -> list | tuple | None:
    if not isinstance(env, dict) and not hasattr(type(env), "__struct_fields__"):
        return None
    if not _short_str(_get(env, "protocol_version"), 64) or not _short_str(_get(env, "message_id"), MAX_ID_CHARS):
        return None
    actions = _get(env, "actions")
    return actions if isinstance(actions, (list, tuple)) else None


def _ignore(out: Hints, c: HintCounts, kind: str, what: str) -> None:
    setattr(c, kind, getattr(c, kind) + 1)
    if len(out.ignored) < MAX_ACTIONS:
        text = f"{kind}: {what}"[:160]
        if not text.isprintable():          # a client's type name reaches the logs: escape it
            text = text.encode("unicode_escape").decode("ascii")[:160]
        out.ignored.append(text)


def _read_action(a, out: Hints, seen: set[str], c: HintCounts) -> None:
    atype = _get(a, "action_type")
    if not _short_str(atype, 128):
        return _ignore(out, c, "malformed", "action_type")
    if not atype.startswith(PREFIX):
        if atype in stdhints.TYPES:      # a standard action the connector executes
            if not _short_str(_get(a, "action_id"), MAX_ID_CHARS):
                out.refused.append("malformed")
                return
            return stdhints.read(atype, _get(a, "action_version"), _get(a, "payload"), out)
        c.foreign += 1                   # another component's action: not ours to judge
        return
    reader = _READERS.get(atype)
    if reader is None:
        return _ignore(out, c, "unknown_type", atype)
    version = _get(a, "action_version")
    m = _VERSION_RE.fullmatch(version) if _short_str(version, 32) else None
    if m is None:
        return _ignore(out, c, "malformed", f"{atype}: action_version")
    if int(m.group(1)) != MAJOR:
        return _ignore(out, c, "unknown_version", f"{atype}@{version}")
    payload = _get(a, "payload")
    if not _short_str(_get(a, "action_id"), MAX_ID_CHARS) or not isinstance(payload, dict):
        return _ignore(out, c, "malformed", f"{atype}: action_id or payload")
    if atype in seen:
        return _ignore(out, c, "duplicate", atype)
    bad = reader(payload, out)
    if bad is not None:
        return _ignore(out, c, "malformed", f"{atype}: {bad}")
    seen.add(atype)
    out.actions += 1
    c.actions += 1


# ------------------------------------------------------------------ payload schemas (version 1)
_BAD = object()


def clean_id(v, limit: int = MAX_ID_CHARS) -> str | None:
    """A printable, non-empty string of at most `limit` characters (stripped), else None."""
    if not isinstance(v, str):
        return None
    v = v.strip()
    return v if v and len(v) <= limit and v.isprintable() else None


def _opt(p: dict, key: str, check):
    v = p.get(key)
    if v is None:
        return None
    r = check(v)
    return _BAD if r is None else r


def _tenant(v) -> str | None:
    return v if isinstance(v, str) and TENANT_RE.fullmatch(v) else None


def _index(v) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < _MAX_CALL else None


def _seconds(v) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    v = float(v)
    return v if math.isfinite(v) and 0.0 <= v <= MAX_EXPECTED_S else None


def _identity(p: dict, out: Hints) -> str | None:
    wf = clean_id(p.get("workflow_id"))
    if wf is None:
        return "workflow_id"
    vals = {"agent": _opt(p, "agent", clean_id), "tenant": _opt(p, "tenant", _tenant),
            "thread": _opt(p, "thread", clean_id), "call": _opt(p, "call", _index)}
    for k, v in vals.items():
        if v is _BAD:
            return k
    out.workflow, out.agent, out.tenant = wf, vals["agent"], vals["tenant"]
    out.thread, out.call = vals["thread"], vals["call"]
    return None


def _workflow_end(p: dict, out: Hints) -> str | None:
    out.end = True
    return None


def _tool_call(p: dict, out: Hints) -> str | None:
    s = _opt(p, "expected_s", _seconds)
    if s is _BAD:
        return "expected_s"
    out.tool_call, out.tool_expected_s = True, s
    return None


def _warmup(p: dict, out: Hints) -> str | None:
    out.warmup = True
    return None


_READERS = {IDENTITY: _identity, WORKFLOW_END: _workflow_end, TOOL_CALL: _tool_call, WARMUP: _warmup}

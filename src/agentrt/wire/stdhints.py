"""The standard KV-hint actions the connector executes, read from vLLM's `kv_hints` envelope as
untrusted input: `kv.retain` and `vllm.set_priority`.

Schemas and limits are those of vLLM's kv_hints work (the envelope of vLLM 0.32,
`vllm/v1/kv_hints/protocol.py`; the actions as defined upstream in `vllm/v1/kv_hints/retain.py`
and `vllm/v1/kv_hints/actions.py` with that directory's README; no vLLM release executes them):

    kv.retain           {"scope": str | null, "directives": [directive, ...]}
      directive         {"start": int >= 0 (default 0), "end": int > start | null,
                         "priority": int 0..100, "duration": seconds 0..30 days | null,
                         "covers_output": bool}
        `end` null: to the end of the sequence, generated tokens included; `covers_output` (not
        with start/end): the generated tail only; `priority` 0 releases the range; `duration`
        null: no lapse of its own (the connector caps it, `retain_max_s`). No other directive
        key; priorities must not increase along the token axis (a prefix cache serves a block
        only if its predecessors survive). At most 16 kv.retain actions an envelope (their
        directives concatenated; they must share a scope) and 128 directives in all.
    vllm.set_priority   {"target": "request_cached", "location": "local_g1",
                         "claim_id": str of 1..256, "revision": int >= 0, "value": int | null,
                         "ttl_seconds": number > 0}
        No other key; `ttl_seconds` finite and required with a value, absent with a null value
        (which clears the claim). agentrt reads at most 16 of them an envelope.

Action versions are `MAJOR[.MINOR[.PATCH]]`; major 1 is read, any other major is refused as
`unknown_version`. An action that breaks its schema is refused as `malformed`, what is over the
caps as `too_many`; the reasons go to `Hints.refused` (the connector counts them with the
retention outcomes). Reading never raises. `check_client_envelope` is the strict form for
`agentrt serve`, which refuses a client's bad envelope with a clear error instead.
"""

from __future__ import annotations

import math
import re

from agentrt.runtime.retention import PriorityClaim, RetainHint, Span

RETAIN = "kv.retain"
SET_PRIORITY = "vllm.set_priority"
TYPES = (RETAIN, SET_PRIORITY)
MAJOR = 1
MAX_PRIORITY = 100
MAX_DURATION_S = 30 * 24 * 3600.0
MAX_RETAIN_ACTIONS = 16
MAX_DIRECTIVES = 128
MAX_CLAIMS = 16
MAX_CLAIM_ID = 256
MAX_SCOPE = 512
_MAX_TOKEN = 1 << 40
_MAX_INT = 1 << 62
_VERSION_RE = re.compile(r"(\d{1,6})(?:\.\d{1,6}){0,2}")
_DIRECTIVE_KEYS = frozenset({"start", "end", "priority", "duration", "covers_output"})
_CLAIM_KEYS = frozenset({"target", "location", "claim_id", "revision", "value", "ttl_seconds"})


class BadHint(ValueError):
    """One action's payload breaks its schema (the message says how)."""


def _int(v, lo: int, hi: int, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise BadHint(f"{what} must be an integer in [{lo}, {hi}]")
    return v


def _seconds(v, what: str, positive: bool) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise BadHint(f"{what} must be a number")
    f = float(v)
    if not math.isfinite(f) or f < 0 or (positive and f == 0) or f > MAX_DURATION_S:
        raise BadHint(f"{what} must be a finite number in {'(0' if positive else '[0'}, {MAX_DURATION_S:g}]")
    return f


def _text(v, limit: int, what: str) -> str:
    if not isinstance(v, str) or not 0 < len(v) <= limit or not v.isprintable():
        raise BadHint(f"{what} must be printable text of 1 to {limit} characters")
    return v


def _span(d) -> Span:
    if not isinstance(d, dict):
        raise BadHint("each directive must be an object")
    extra = set(d) - _DIRECTIVE_KEYS
    if extra:
        raise BadHint(f"unknown directive keys {sorted(str(k)[:32] for k in extra)[:4]}")
    priority = _int(d.get("priority"), 0, MAX_PRIORITY, "priority")
    output = d.get("covers_output", False)
    if not isinstance(output, bool):
        raise BadHint("covers_output must be a boolean")
    if output and ("start" in d or "end" in d):
        raise BadHint("covers_output cannot be combined with start or end")
    start = _int(d.get("start", 0), 0, _MAX_TOKEN, "start")
    end = d.get("end")
    if end is not None:
        end = _int(end, start + 1, _MAX_TOKEN, "end (greater than start)")
    duration = d.get("duration")
    duration = None if duration is None else _seconds(duration, "duration", positive=False)
    return Span(start, end, priority, duration, output)


def _retain(payload: dict) -> RetainHint:
    scope = payload.get("scope")
    if scope is not None:
        scope = _text(scope, MAX_SCOPE, "scope")
    raw = payload.get("directives")
    if not isinstance(raw, list):
        raise BadHint("directives must be a list")
    spans = tuple(_span(d) for d in raw[:MAX_DIRECTIVES])
    last = None
    for s in sorted(spans, key=lambda s: (math.inf if s.output else s.start)):
        if last is not None and s.priority > last:
            raise BadHint("priorities must not increase along the token axis (a prefix cache "
                          "keeps a block only as long as its predecessors)")
        last = s.priority
    return RetainHint(scope, spans)


def _claim(payload: dict) -> PriorityClaim:
    extra = set(payload) - _CLAIM_KEYS
    if extra:
        raise BadHint(f"unknown keys {sorted(str(k)[:32] for k in extra)[:4]}")
    if payload.get("target") != "request_cached" or payload.get("location") != "local_g1":
        raise BadHint('target must be "request_cached" and location "local_g1"')
    claim_id = _text(payload.get("claim_id"), MAX_CLAIM_ID, "claim_id")
    revision = _int(payload.get("revision"), 0, _MAX_INT, "revision")
    value, ttl = payload.get("value"), payload.get("ttl_seconds")
    if value is None:
        if ttl is not None:
            raise BadHint("clearing a claim (value null) must omit ttl_seconds")
        return PriorityClaim(claim_id, revision, None, None)
    value = _int(value, -_MAX_INT, _MAX_INT, "value")
    if ttl is None:
        raise BadHint("setting a priority needs a finite positive ttl_seconds")
    return PriorityClaim(claim_id, revision, value, _seconds(ttl, "ttl_seconds", positive=True))


def major_ok(version) -> bool | None:
    """True for major 1, False for another major, None for a malformed version string."""
    m = _VERSION_RE.fullmatch(version) if isinstance(version, str) and len(version) <= 32 else None
    return None if m is None else int(m.group(1)) == MAJOR


def read(atype: str, version, payload, out) -> None:
    """Read one standard action into `out` (a `kvhints.Hints`): its retain hint, its claims, or
    the reason it was refused (`out.refused`)."""
    ok = major_ok(version)
    if ok is None or not isinstance(payload, dict):
        out.refused.append("malformed")
        return
    if not ok:
        out.refused.append("unknown_version")
        return
    try:
        if atype == RETAIN:
            _read_retain(payload, out)
        elif len(out.claims) >= MAX_CLAIMS:
            out.refused.append("too_many")
        else:
            out.claims.append(_claim(payload))
    except (BadHint, TypeError, OverflowError):
        out.refused.append("malformed")


def _read_retain(payload: dict, out) -> None:
    out.retain_actions += 1
    if out.retain_actions > MAX_RETAIN_ACTIONS:
        out.refused.append("too_many")
        return
    hint = _retain(payload)
    prev = out.retain
    if prev is not None and prev.scope != hint.scope:
        raise BadHint("kv.retain actions of one envelope must share a scope")
    spans = (prev.spans if prev is not None else ()) + hint.spans
    if len(spans) > MAX_DIRECTIVES or len(payload["directives"]) > MAX_DIRECTIVES:
        out.refused.append("too_many")
    out.retain = RetainHint(hint.scope, spans[:MAX_DIRECTIVES])


def check_client_envelope(env) -> list[dict]:
    """The actions of a client's `kv_hints` for `agentrt serve`: only kv.retain and
    vllm.set_priority, each at major version 1 and within its schema; ValueError naming the
    first thing wrong otherwise (the server answers 400)."""
    if not isinstance(env, dict):
        raise ValueError("kv_hints must be an object (vLLM's KvHintsEnvelope)")
    actions = env.get("actions")
    if not isinstance(actions, list) or not actions:
        raise ValueError("kv_hints.actions must be a non-empty list")
    if len(actions) > MAX_RETAIN_ACTIONS + MAX_CLAIMS:
        raise ValueError(f"kv_hints may hold at most {MAX_RETAIN_ACTIONS + MAX_CLAIMS} actions")
    out = []
    n = {RETAIN: 0, SET_PRIORITY: 0, "directives": 0}
    for i, a in enumerate(actions):
        where = f"kv_hints.actions[{i}]"
        if not isinstance(a, dict) or a.get("action_type") not in TYPES:
            raise ValueError(f"{where}: only {' and '.join(TYPES)} actions may come from clients "
                             "(the server sends agentrt's own)")
        ok = major_ok(a.get("action_version"))
        if not ok:
            raise ValueError(f"{where}: action_version must be 1.x, got {str(a.get('action_version'))[:32]!r}")
        aid = a.get("action_id", f"client-{i}")
        if not isinstance(aid, str) or not 0 < len(aid) <= MAX_CLAIM_ID or not aid.isprintable():
            raise ValueError(f"{where}.action_id must be printable text of 1 to {MAX_CLAIM_ID} characters")
        payload = a.get("payload")
        if not isinstance(payload, dict):
            raise ValueError(f"{where}.payload must be an object")
        try:
            if a["action_type"] == RETAIN:
                _retain(payload)
                n["directives"] += len(payload["directives"])
            else:
                _claim(payload)
        except BadHint as e:
            raise ValueError(f"{where}.payload: {e}") from None
        n[a["action_type"]] += 1
        if n[RETAIN] > MAX_RETAIN_ACTIONS or n[SET_PRIORITY] > MAX_CLAIMS or n["directives"] > MAX_DIRECTIVES:
            raise ValueError(f"kv_hints may hold at most {MAX_RETAIN_ACTIONS} kv.retain actions with "
                             f"{MAX_DIRECTIVES} directives in all and {MAX_CLAIMS} vllm.set_priority actions")
        out.append({"action_id": aid, "action_type": a["action_type"],
                    "action_version": a["action_version"], "payload": payload})
    return out

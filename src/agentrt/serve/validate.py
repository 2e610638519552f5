"""Request validation and OpenAI-style errors, checked before anything is forwarded.

Model: the server checks only what it must read itself (the JSON body, `messages`, `prompt`, the
identity fields it adds or merges: `model`, `session_id`, `vllm_xargs`, identity metadata) and
rejects those with the status vLLM gives for the same mistake (400), in OpenAI's error shape
`{"error": {"message", "type", "param", "code"}}`. Everything else (sampling parameters, message
contents, unknown models, lengths) is left to the upstream, whose errors pass through unchanged.
So a malformed request gets the same status from `agentrt serve` as from vLLM. One deliberate
difference from OpenAI's own API, inherited from vLLM: a missing `model` is not an error (vLLM
serves its default model).

Stricter than vLLM, because the server must stay up and consistent for every tenant:
- the body is parsed with orjson, which refuses what JSON forbids and Python's `json` lets
  through: `NaN`/`Infinity`, lone UTF-16 surrogates (`"\ud800"`), integers beyond 64 bits; and
  nesting deeper than 254 levels (what orjson encodes again for the upstream); all 400s;
- fields the server owns are refused (400, naming them): `cache_salt` (the server sets the
  tenant's salt; silently replacing a client's would drop an isolation it asked for without
  telling it), `kv_transfer_params` (instructions to the KV connector; the server sends its
  kv_hints envelope there), and `agentrt_*` keys in `vllm_xargs` (identity comes from headers or
  `metadata`; see identity.py);
- a client's `kv_hints` (vLLM's hint envelope) may hold only the standard actions `kv.retain` and
  `vllm.set_priority`, each within its schema (`wire/stdhints.py`): agentrt's own actions could
  name another tenant's workflow or claim a warm-up, and are the server's; anything else is a 400
  naming the action. The server forwards the actions in its own envelope.
"""

from __future__ import annotations

import orjson

from agentrt.wire.stdhints import check_client_envelope

JSON_TYPES = ("application/json",)
SERVER_FIELDS = ("cache_salt", "kv_transfer_params")
MAX_DEPTH = 254             # the deepest nesting orjson encodes again
MAX_OUTPUT_TOKENS = 1 << 24  # longer than any model's context: a claim past it is not an estimate


class RequestError(Exception):
    """A request the server refuses; `body()` is the OpenAI-style error object."""

    def __init__(self, message: str, param: str | None = None, status: int = 400,
                 type_: str = "BadRequestError") -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.status = status
        self.type = type_

    def body(self) -> dict:
        return error_body(self.message, self.type, self.param, self.status)


def error_body(message: str, type_: str, param: str | None, code: int | str | None) -> dict:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def parse_body(raw: bytes, content_type: str | None) -> dict:
    """The request's JSON object, or a RequestError as vLLM would answer."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media not in JSON_TYPES:
        raise RequestError("Unsupported Media Type: Only 'application/json' is allowed")
    if not raw.strip():
        raise RequestError("request body is empty; expected a JSON object", "body")
    try:
        body = orjson.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise RequestError(f"request body is not valid JSON: {e}", "body") from None
    if not isinstance(body, dict):
        raise RequestError("request body must be a JSON object", "body")
    # orjson reads nesting to 1024 but writes at most MAX_DEPTH levels: the forwarded body would
    # fail to encode after the call was counted. Fewer brackets than that cannot nest deeper.
    if raw.count(b"[") + raw.count(b"{") > MAX_DEPTH and _depth(body) > MAX_DEPTH:
        raise RequestError(f"request body is nested deeper than {MAX_DEPTH} levels", "body")
    return body


def _depth(obj) -> int:
    """Nesting depth of a parsed JSON value (an object or array is one level), iteratively."""
    deepest, stack = 0, [(obj, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict):
            v = v.values()
        elif not isinstance(v, list):
            continue
        deepest = max(deepest, d)
        stack.extend((x, d + 1) for x in v if isinstance(x, (dict, list)))
    return deepest


def _check_common(body: dict) -> None:
    for f in SERVER_FIELDS:
        if f in body:
            raise RequestError(f"'{f}' is set by the server, not by clients", f)
    if "kv_hints" in body:
        try:
            check_client_envelope(body["kv_hints"])
        except ValueError as e:
            raise RequestError(str(e), "kv_hints") from None
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise RequestError("'model' must be a string", "model")
    sid = body.get("session_id")
    if sid is not None and not isinstance(sid, str):
        raise RequestError("'session_id' must be a string", "session_id")
    xargs = body.get("vllm_xargs")
    if xargs is not None:
        if not isinstance(xargs, dict):
            raise RequestError("'vllm_xargs' must be an object", "vllm_xargs")
        for k, v in xargs.items():
            if k.startswith("agentrt_"):
                raise RequestError("'vllm_xargs' may not set agentrt_* fields: the server sets them "
                                   "from the request's identity", f"vllm_xargs.{k}")
            if not _xarg_ok(v):
                raise RequestError("'vllm_xargs' values must be strings, numbers or lists of them",
                                   f"vllm_xargs.{k}")


def _xarg_ok(v) -> bool:
    scalar = (str, int, float)
    if isinstance(v, bool) or isinstance(v, scalar):
        return True
    return isinstance(v, list) and all(isinstance(x, scalar) for x in v)


def validate_chat(body: dict) -> None:
    _check_common(body)
    if "messages" not in body:
        raise RequestError("'messages' is a required property", "messages")
    msgs = body["messages"]
    if not isinstance(msgs, list):
        raise RequestError("'messages' must be an array", "messages")
    if not msgs:
        raise RequestError("'messages' must contain at least one message", "messages")
    for i, m in enumerate(msgs):
        if not isinstance(m, dict):
            raise RequestError(f"messages[{i}] must be an object", f"messages.{i}")
        if not isinstance(m.get("role"), str):
            raise RequestError(f"messages[{i}] needs a string 'role'", f"messages.{i}.role")


def validate_completion(body: dict) -> None:
    _check_common(body)
    p = body.get("prompt")
    if p is None or p == "" or p == []:
        raise RequestError("'prompt' is a required property and must be non-empty", "prompt")
    if isinstance(p, str):
        return
    if isinstance(p, list):
        if all(isinstance(x, str) for x in p):
            return
        if all(isinstance(x, int) and not isinstance(x, bool) for x in p):
            return
        if all(isinstance(x, list) and all(isinstance(y, int) for y in x) for x in p):
            return
    raise RequestError("'prompt' must be a string, an array of strings, an array of token ids "
                       "or an array of token-id arrays", "prompt")

"""What the hot path (`proxy.py`) reads from upstream answers and the error answers it writes.

- A copy of a 200 answer (decompressed when the upstream gzips or deflates it; any other
  encoding is not read) gives the call's `usage` and whether a choice ends in a tool call
  (`finish_reason` `tool_calls` or `function_call`), for the runtime's `CallFinished`. A body
  that is not JSON, or not an object, gives neither: the answer itself is relayed untouched.
- Error answers are OpenAI's error shape (`validate.error_body`). An upstream failure's message
  names the upstream's address only to callers who may see it: with `--auth` tenants are not
  told internal addresses or socket errors (they are logged instead).
"""

from __future__ import annotations

import logging
import re
import zlib

import orjson

from agentrt.serve.validate import error_body

log = logging.getLogger("agentrt.serve")


def error_response(status: int, message: str, type_: str, param: str | None = None):
    return status, orjson.dumps(error_body(message, type_, param, status))


async def send_json(send, status: int, body: bytes, headers: list | None = None) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode())] + (headers or [])})
    await send({"type": "http.response.body", "body": body})


TOOL_FINISH = re.compile(rb'"finish_reason"\s*:\s*"(?:tool_calls|function_call)"')
TOOL_REASONS = ("tool_calls", "function_call")


def read_answer(data: bytes) -> tuple[dict | None, bool]:
    """A JSON answer's `usage`, and whether one of its choices ends in a tool call."""
    try:
        obj = orjson.loads(data)
    except ValueError:
        return None, False
    if not isinstance(obj, dict):
        return None, False
    u = obj.get("usage")
    choices = obj.get("choices")
    tool = isinstance(choices, list) and any(
        isinstance(c, dict) and c.get("finish_reason") in TOOL_REASONS for c in choices)
    return (u if isinstance(u, dict) else None), tool


def body_decoder(encoding: bytes | None):
    """A zlib decoder for a copy of the body (usage sniffing), None for identity, False: unknown."""
    if not encoding or encoding.strip().lower() == b"identity":
        return None
    if encoding.strip().lower() in (b"gzip", b"x-gzip", b"deflate"):
        return zlib.decompressobj(47)          # gzip or zlib header, detected
    return False


def upstream_error(upstream: str, hide: bool, what: str, detail: str, where: bool = False,
                   timeout: bool = False) -> str:
    """The message a client gets for an upstream failure ("upstream <what>: <detail>", with the
    upstream's address when `where`). With `hide` (`--auth`), tenants are not told the internal
    address or socket errors (logged here instead), as /health hides them; a timeout's detail
    (how long) is kept."""
    full = f"upstream {upstream} {what}" if where else f"upstream {what}"
    if not hide:
        return f"{full}: {detail}"
    log.warning("agentrt serve: %s: %s", full, detail)
    return f"upstream {what}: {detail}" if timeout else f"upstream {what}"


def inflate(dec, data: bytes) -> bytes:
    try:
        return dec.decompress(data)
    except zlib.error:
        return b""

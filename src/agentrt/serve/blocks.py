"""Prompts as chained block hash ids, so the runtime's anchor inference works without metadata,
and the way back: the leading blocks of an agent's last prompt as a warm-up request.

Model (characters, not tokens: the server does not tokenize):
- A chat prompt is a list of segments: the leading system/developer messages (the "head"), the
  request's `tools` (one segment), then every other message. Each segment is serialised (role,
  name, content, tool calls) and cut into blocks of `block_chars` (256) characters; a block never
  spans two segments, so a system prompt ends a block and the user's text cannot change its ids.
- When the head (system messages and tools) is not empty, one extra block comes first: a digest of
  the whole head. The runtime's anchor inference (`anchor_agent`, one block) therefore names an
  agent by its entire system prompt and tools, not only their first 256 characters.
- Ids are chained: block i's id hashes block i-1's id and its own text (blake2b, 63 bits), so equal
  ids mean equal prefixes, as in vLLM's prefix cache.
- A completions prompt is one segment: a string cut every `block_chars` characters, or token ids
  cut every `block_chars // 4` ids. A list of prompts is keyed by its first.
- The chain starts from the tenant's seed (`tenant_seed`: 0 for the default tenant), so equal
  prompts of two tenants are different blocks to the runtime, as they are to the engine under
  their different `cache_salt`s.
`input_length` in the runtime's units is `len(hash_ids) * block_chars`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

import orjson

HEAD_ROLES = ("system", "developer")
WARMUP_MESSAGE = "."
TEMPLATE_KEYS = ("model", "tools", "chat_template", "chat_template_kwargs")


@dataclass(slots=True)
class PromptBlocks:
    """A prompt's blocks: `hash_ids[i]` ends at character `ends[i][1]` of segment `ends[i][0]`
    (segment -1 is the head digest, which covers no text of its own)."""
    hash_ids: list[int] = field(default_factory=list)
    ends: list[tuple[int, int]] = field(default_factory=list)


@dataclass(slots=True)
class PromptTemplate:
    """What a warm-up needs of an agent's latest prompt: its endpoint, the request fields that
    shape the rendered prompt, the segments covering its first blocks, and those blocks."""
    path: str
    fields: dict
    segments: list           # ("msg", message) | ("tools", None) | ("text", str) | ("ids", list)
    blocks: PromptBlocks


def _hash(prev: int, data: bytes) -> int:
    h = hashlib.blake2b(prev.to_bytes(8, "little") + data, digest_size=8).digest()
    return int.from_bytes(h, "little") >> 1


def tenant_seed(tenant: str) -> int:
    """The first link of a tenant's block chains (0 for "default": ids as before tenancy)."""
    return 0 if tenant == "default" else _hash(0, b"tenant\x1e" + tenant.encode())


def _message_text(m: dict) -> str:
    content = m.get("content")
    text = content if isinstance(content, str) else json.dumps(content, sort_keys=True, default=str)
    extra = {k: m[k] for k in ("name", "tool_calls", "tool_call_id") if m.get(k) is not None}
    tail = json.dumps(extra, sort_keys=True, default=str) if extra else ""
    return f"{m.get('role')}\x1f{text}\x1f{tail}"


def _content_span(m: dict) -> tuple[int, int] | None:
    """Where a string content sits in `_message_text(m)` (None: not a string)."""
    if not isinstance(m.get("content"), str):
        return None
    start = len(str(m.get("role"))) + 1
    return start, start + len(m["content"])


def chat_segments(body: dict) -> list:
    msgs = body["messages"]
    n_head = 0
    while n_head < len(msgs) and msgs[n_head].get("role") in HEAD_ROLES:
        n_head += 1
    segs: list = [("msg", m) for m in msgs[:n_head]]
    if body.get("tools"):
        segs.append(("tools", None))
    segs.extend(("msg", m) for m in msgs[n_head:])
    return segs


def completion_segments(body: dict) -> list:
    p = body["prompt"]
    if isinstance(p, list) and p and isinstance(p[0], (str, list)):
        p = p[0]
    return [("text", p)] if isinstance(p, str) else [("ids", list(p))]


def prompt_blocks(body: dict, segments: list, block_chars: int, seed: int = 0) -> PromptBlocks:
    out = PromptBlocks()
    prev = seed
    head = [s for s in segments if s[0] == "tools" or (s[0] == "msg" and s[1].get("role") in HEAD_ROLES)]
    if head:
        parts = [s[1] for s in head if s[0] == "msg"] + [body.get("tools")]
        try:
            digest = orjson.dumps(parts, option=orjson.OPT_SORT_KEYS)
        except TypeError:
            digest = json.dumps(parts, sort_keys=True, default=str).encode("utf-8", "surrogatepass")
        prev = _hash(prev, b"head\x1e" + digest)
        out.hash_ids.append(prev)
        out.ends.append((-1, 0))
    for i, (kind, val) in enumerate(segments):
        if kind == "ids":
            step = max(1, block_chars // 4)
            for s in range(0, len(val), step):
                chunk = val[s:s + step]
                prev = _hash(prev, b"ids\x1e" + ",".join(map(str, chunk)).encode())
                out.hash_ids.append(prev)
                out.ends.append((i, s + len(chunk)))
            continue
        if kind == "tools":
            text = "tools\x1f" + json.dumps(body.get("tools"), sort_keys=True, default=str)
        elif kind == "msg":
            text = _message_text(val)
        else:
            text = val
        for s in range(0, max(1, len(text)), block_chars):
            chunk = text[s:s + block_chars]
            prev = _hash(prev, kind.encode() + b"\x1e" + chunk.encode("utf-8", "surrogatepass"))
            out.hash_ids.append(prev)
            out.ends.append((i, s + len(chunk)))
    return out


def template(path: str, body: dict, segments: list, blocks: PromptBlocks, max_blocks: int) -> PromptTemplate:
    """Keep only what the first `max_blocks` blocks need (an anchor is never longer)."""
    n = min(max_blocks, len(blocks.hash_ids))
    last_seg = max((blocks.ends[i][0] for i in range(n)), default=-1)
    kept = PromptBlocks(blocks.hash_ids[:n], blocks.ends[:n])
    fields = {k: body[k] for k in TEMPLATE_KEYS if k in body}
    segs = list(segments[:last_seg + 1])
    if not any(kind == "tools" for kind, _ in segs):
        fields.pop("tools", None)       # the kept blocks end before the tools: a warm-up sends none
    if segs and n:                      # drop the text past the last kept block
        kind, val = segs[-1]
        end = kept.ends[-1][1]
        segs[-1] = (kind, _truncated(val, end) if kind == "msg" else val if kind == "tools" else val[:end])
    return PromptTemplate(path, fields, segs, kept)


def warmup_body(t: PromptTemplate, anchor: list[int]) -> dict | None:
    """A request that prefills `anchor` (a prefix of the template's blocks) plus a minimal user
    message, or None when the template no longer starts with that anchor."""
    n = len(anchor)
    if n == 0 or t.blocks.hash_ids[:n] != anchor:
        return None
    seg, end = t.blocks.ends[n - 1]
    if seg < 0:
        return None              # only the head digest: no text to prefill
    body = dict(t.fields)
    if not t.path.endswith("/chat/completions"):
        kind, val = t.segments[seg]
        body["prompt"] = val[:end]
    else:
        msgs = []
        tools = False
        for i, (kind, val) in enumerate(t.segments[:seg + 1]):
            if kind == "tools":
                tools = True
            elif kind == "msg":
                msgs.append(_truncated(val, end) if i == seg else val)
        if not tools:
            body.pop("tools", None)
        if not msgs or msgs[-1].get("role") != "user":
            msgs.append({"role": "user", "content": WARMUP_MESSAGE})
        body["messages"] = msgs
    body.update(max_tokens=1, temperature=0, stream=False)
    return body


def _truncated(m: dict, end: int) -> dict:
    """The message cut after character `end` of its serialisation, when that falls inside a
    string content; otherwise the whole message (a slightly longer warm-up does no harm)."""
    span = _content_span(m)
    if span is None or not span[0] <= end < span[1]:
        return m
    return dict(m, content=m["content"][:end - span[0]])

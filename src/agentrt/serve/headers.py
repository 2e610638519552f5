"""Which of a client's request headers reach the upstream: an allow-list, never a deny-list.

Model: the server writes every forwarded request itself: the body is JSON it encoded (its own
`content-type`, no `content-encoding`), host, length and connection are the pool's, identity
travels in the body (`identity.py`). So a client's header reaches vLLM only when it is on the
list, and nothing vLLM acts on slips through because nobody thought to deny it:
- always: `accept`, `accept-encoding` (answers pass back with their encoding), `user-agent`, and
  W3C trace context (`traceparent`, `tracestate`);
- without `--auth`: `authorization` (the client's key for a vLLM started with `--api-key`); with
  `--auth` the client's key stays here and `--upstream-api-key` goes instead;
- without `--auth` and with the `fcfs` scheduler: `x-vllm-priority` (as the body's `priority`);
- any name the operator adds with `--forward-header`, except those in `NEVER`.
`NEVER` are headers vLLM or HTTP itself acts on that no client may set through the server:
`x-request-id` (vLLM's engine request id: client-chosen ids collide across tenants),
`x-data-parallel-rank` (picks the engine's data-parallel rank), `endpoint-load-metrics-format`,
`cookie`, identity headers of every convention (`conventions.py`: read here, sent in the body)
and framing headers. A name repeated by the client is sent once, its values
joined with ", " (list-valued headers mean the same; a strict upstream refuses repeats).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from agentrt.serve.conventions import HEADERS as IDENTITY_HEADERS
from agentrt.wire.priority import PRIORITY_HEADER

ALWAYS = ("accept", "accept-encoding", "user-agent", "traceparent", "tracestate")
NEVER = frozenset({
    "host", "content-length", "content-type", "content-encoding", "transfer-encoding", "connection",
    "keep-alive", "te", "trailer", "upgrade", "expect", "proxy-authorization", "proxy-connection",
    "cookie", "x-request-id", "x-data-parallel-rank", "endpoint-load-metrics-format",
    "authorization", PRIORITY_HEADER, *IDENTITY_HEADERS,
})
TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


def check_forward_names(names: Iterable[str]) -> tuple[str, ...]:
    """The operator's extra header names, lower-cased; ValueError naming the flag for one that is
    not a header name or that no client may set through the server."""
    out = []
    for name in names:
        n = name.strip().lower()
        if not TOKEN.match(n):
            raise ValueError(f"--forward-header {name!r}: not an HTTP header name")
        if n in NEVER:
            raise ValueError(f"--forward-header {name!r}: the server sets or withholds this header "
                             "itself (vLLM or HTTP acts on it); it cannot be forwarded from clients")
        out.append(n)
    return tuple(dict.fromkeys(out))


class ForwardHeaders:
    """The allow-list of one server (see the module docstring)."""

    __slots__ = ("allowed",)

    def __init__(self, auth: bool, scheduler_sets_priority: bool, extra: Iterable[str] = ()) -> None:
        names = set(ALWAYS) | set(check_forward_names(extra))
        if not auth:
            names.add("authorization")
            if not scheduler_sets_priority:
                names.add(PRIORITY_HEADER)
        self.allowed = frozenset(n.encode() for n in names)

    def pick(self, headers: Iterable[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
        """The client's headers (lower-case names, as ASGI gives them) that go upstream, each once."""
        out: dict[bytes, bytes] = {}
        allowed = self.allowed
        for k, v in headers:
            if k in allowed:
                out[k] = out[k] + b", " + v if k in out else v
        return list(out.items())

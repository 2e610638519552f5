"""Stored warm-up templates are bounded by bytes per tenant and in all, not only by count (item 8
of issue 42): a tenant sending megabytes of `tools` under a new agent id per call holds a few
templates, never thousands, and another tenant's template stays."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi", reason="the serve extra is not installed")

from agentrt.serve.blocks import PromptBlocks, PromptTemplate  # noqa: E402
from agentrt.serve.identity import resolve_identity  # noqa: E402
from agentrt.serve.runtime_bridge import RuntimeBridge  # noqa: E402
from agentrt.serve.templates import TemplateStore, template_bytes  # noqa: E402

USAGE = {"prompt_tokens": 100, "prompt_tokens_details": {"cached_tokens": 0}}
MB = 1 << 20


def call(b: RuntimeBridge, tenant: str, agent: str, tools_bytes: int = 0, content=None) -> None:
    body = {"model": "m", "messages": [{"role": "system", "content": content or f"You are {agent}. " * 30},
                                       {"role": "user", "content": "go"}]}
    if tools_bytes:
        body["tools"] = [{"type": "function", "function": {"name": "t", "description": "d" * tools_bytes}}]
    ident = resolve_identity({"x-agent-id": agent, "x-workflow-id": f"w-{agent}"}, body, b.next_call_number(),
                             tenant)
    b.finish(b.arrive("/v1/chat/completions", body, ident), 200, USAGE)


def test_templates_with_megabytes_of_tools_stay_within_the_tenant_bytes():
    b = RuntimeBridge("cachesage", template_bytes_per_tenant=3 * MB, template_bytes=8 * MB)
    call(b, "team-b", "planner")
    for i in range(10):                          # 1 MB of tools under a new agent id each time
        call(b, "team-a", f"x{i}", tools_bytes=MB)
    t = b.templates
    assert t.tenant_bytes("team-a") <= 3 * MB and t.total <= 8 * MB
    assert ("team-a", "x9") in t and ("team-a", "x0") not in t      # the latest kept, the oldest gone
    assert ("team-b", "planner") in t
    assert t.total == sum(template_bytes(t.get(k)) for k in t._lru)
    call(b, "team-a", "huge", tools_bytes=4 * MB)   # larger than a tenant's bytes: not kept
    assert ("team-a", "huge") not in t and t.refused == 1


def test_list_form_content_counts_too():
    b = RuntimeBridge("cachesage", template_bytes_per_tenant=MB, template_bytes=8 * MB)
    content = [{"type": "text", "text": "p" * (300 << 10)}]
    for i in range(8):
        call(b, "team-a", f"y{i}", content=content)
    assert b.templates.tenant_bytes("team-a") <= MB and len(b.templates) <= 3


def template(n: int) -> PromptTemplate:
    return PromptTemplate("/v1/chat/completions", {}, [("msg", {"role": "system", "content": "s" * n})],
                          PromptBlocks([1], [(0, n)]))


def test_the_total_is_taken_from_the_tenant_holding_the_most_bytes():
    s = TemplateStore(100, bytes_per_tenant=1000, bytes_total=1500)
    s.set(("b", "one"), template(300))
    for i in range(5):
        s.set(("a", f"a{i}"), template(300))
    assert s.total <= 1500 and ("b", "one") in s
    assert s.tenant_bytes("a") <= 1000
    s.set(("b", "one"), template(10))             # replaced: its bytes follow
    assert s.total == sum(s.tenant_bytes(t) for t in ("a", "b"))


def test_the_count_bound_keeps_the_bytes_right():
    s = TemplateStore(3, bytes_per_tenant=10**6, bytes_total=10**6)
    for i in range(10):
        s.set(("a", f"a{i}"), template(100))
    assert len(s) == 3 and s.total == 3 * template_bytes(template(100))

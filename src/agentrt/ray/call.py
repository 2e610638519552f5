"""One OpenAI request as the Ray deployment carries it: identity, prompt blocks, forwarded body.

Model
- The ingress turns each HTTP request into an `AgentCall` before it asks the replica handle for
  it, so the request router (which runs in the ingress process and sees the handle call's
  arguments) reads identity and prompt blocks without parsing or tokenizing anything itself.
- Identity comes from `agentrt.serve.identity.resolve_identity`, the rules `agentrt serve` uses:
  headers `X-Workflow-Id` / `X-Agent-Id` / `X-Workflow-End` / `X-Tenant-Id`, else the body's
  `metadata`, else vLLM's `session_id`, else a digest of the chat's first non-system message.
  An agent not named is `anchor:<id of the prompt's first block>` (its system prompt, in effect).
- Prompt blocks: the prompt is tokenized as vLLM tokenizes it (the model's chat template with
  the generation prompt, no extra special tokens; a completion prompt with them) and cut into
  `blocks.chain` ids. A router that misjudges block boundaries would see no hits at all, which is
  why this is done with the engine's own tokenizer rather than on characters.
- The forwarded body gains `session_id` and the `vllm_xargs` agentrt fields
  (`identity.forward_body`), so replicas running the agentrt KV connector see the same identity.
- Per-workflow call counters are bounded (`max_workflows`, least recently used dropped) and
  dropped when a workflow ends.
- `messages` exposes the chat (or the completion prompt) so Ray's own `PrefixCacheAffinityRouter`
  can route the same calls, which is how the two are compared (docs/ray.md).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from agentrt.cluster.routing import RouteRequest
from agentrt.ray.blocks import chain, salt_seed
from agentrt.serve.identity import forward_body, resolve_identity

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"


@dataclass(slots=True, eq=False)
class AgentCall:
    path: str                    # CHAT or COMPLETIONS
    body: dict                   # what the replica forwards to vLLM
    tenant: str
    workflow: str                # tenant-scoped workflow key
    agent: str | None
    end: bool                    # the workflow's last call
    call_index: int
    hash_ids: list[int] = field(default_factory=list)
    prompt_tokens: int = 0

    @property
    def messages(self) -> Any:
        return self.body.get("messages", self.body.get("prompt"))

    def route_request(self) -> RouteRequest:
        out = self.body.get("max_completion_tokens") or self.body.get("max_tokens") or 0
        return RouteRequest(tenant=self.tenant, workflow=self.workflow, agent=self.agent,
                            hash_ids=self.hash_ids, prompt_tokens=self.prompt_tokens,
                            output_tokens=int(out) if isinstance(out, int) else 0,
                            call_index=self.call_index, last=self.end)


class CallPreparer:
    """Builds `AgentCall`s with the served model's tokenizer (loaded lazily from `tokenizer`,
    a local directory or an already-built tokenizer object)."""

    def __init__(self, tokenizer: Any, block_size: int, max_workflows: int = 100_000) -> None:
        if block_size <= 0:
            raise ValueError(f"block_size must be > 0, got {block_size}")
        self._tokenizer = tokenizer
        self.block_size = block_size
        self.max_workflows = max_workflows
        self._calls: OrderedDict[str, int] = OrderedDict()
        self._count = 0

    @property
    def tokenizer(self) -> Any:
        if isinstance(self._tokenizer, str):
            from transformers import AutoTokenizer
            self._tokenizer = AutoTokenizer.from_pretrained(self._tokenizer)
        return self._tokenizer

    def tokens(self, path: str, body: dict) -> list[int]:
        tok = self.tokenizer
        if path == CHAT:
            kwargs = dict(body.get("chat_template_kwargs") or {})
            ids = tok.apply_chat_template(body["messages"], tools=body.get("tools"),
                                          add_generation_prompt=True, tokenize=True, **kwargs)
            # transformers >= 5 returns a BatchEncoding here, older versions a list
            return list(ids["input_ids"] if hasattr(ids, "keys") else ids)
        prompt = body.get("prompt")
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]      # a batch of prompts is routed by its first
        if isinstance(prompt, list):
            return [int(t) for t in prompt]
        return list(tok.encode(prompt or ""))

    def prepare(self, path: str, body: dict, headers) -> AgentCall:
        """`headers`: any mapping with lower-case keys. Raises `serve.validate.RequestError`
        (a 400) on malformed identity fields."""
        self._count += 1
        ident = resolve_identity(headers, body, self._count)
        tokens = self.tokens(path, body)
        hash_ids = chain(tokens, self.block_size, salt_seed(body.get("cache_salt")))
        agent = ident.agent or (f"anchor:{hash_ids[0]:x}" if hash_ids else "anchor:none")
        index = self._calls.pop(ident.key, 0)
        if not ident.end:
            self._calls[ident.key] = index + 1
            while len(self._calls) > self.max_workflows:
                self._calls.popitem(last=False)
        forwarded = forward_body(body, ident, agent, index)
        return AgentCall(path=path, body=forwarded, tenant=ident.tenant, workflow=ident.key,
                         agent=agent, end=ident.end, call_index=index, hash_ids=hash_ids,
                         prompt_tokens=len(tokens))

    def tracked_workflows(self) -> int:
        return len(self._calls)

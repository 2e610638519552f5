"""One OpenAI request as the Ray deployment carries it: identity, prompt blocks, forwarded body.

Model
- The ingress turns each HTTP request into an `AgentCall` before it asks the replica handle for
  it, so the request router (which runs in the ingress process and sees the handle call's
  arguments) reads identity and prompt blocks without parsing or tokenizing anything itself.
- Validation is `agentrt serve`'s (`serve.validate`: the body parsed with orjson, `messages` /
  `prompt` shapes, the server-owned fields `cache_salt`, `kv_transfer_params`, `kv_hints` and
  `agentrt_*` xargs refused), plus what routing reads and vLLM judges only after the call was
  placed: `max_tokens` / `max_completion_tokens` (an integer in [0, MAX_OUTPUT_TOKENS]),
  prompt token ids (integers in [0, 2^63)), `tools` and `chat_template_kwargs`. A malformed
  body raises `RequestError` naming the field (the ingress answers 400).
- Identity comes from `agentrt.serve.identity.resolve_identity`, the rules `agentrt serve` uses:
  headers `X-Workflow-Id` / `X-Agent-Id` / `X-Workflow-End` / `X-Tenant-Id`, else the body's
  `metadata`, else vLLM's `session_id`, else a digest of the chat's first non-system message.
  An agent not named is `anchor:<id of the prompt's first block>` (its system prompt, in effect).
  There is no authentication: the tenant is whatever the request names.
- Tenants: the forwarded body carries the tenant's `cache_salt` (`serve.auth.Salts`, HMAC of the
  tenant under a secret), so vLLM keeps each tenant's prefixes apart, and the prompt's block ids
  start from that salt as vLLM's hashes do, so the router's mirror keeps them apart too. As in
  `agentrt serve` without `--auth`, the default tenant stays unsalted (`tenant_salts`).
- Prompt blocks: the prompt is tokenized as vLLM tokenizes it (the model's chat template with
  the generation prompt, no extra special tokens; a completion prompt with them) and cut into
  `blocks.chain` ids. A router that misjudges block boundaries would see no hits at all, which is
  why this is done with the engine's own tokenizer rather than on characters.
- The forwarded body gains `session_id`, `cache_salt` and the agentrt `kv_transfer_params` /
  `vllm_xargs` fields (`identity.forward_body`), so replicas running the agentrt KV connector
  see the same identity.
- Per-workflow call counters are bounded (`max_workflows`, least recently used dropped) and
  dropped when a workflow ends.
- `messages` exposes the chat (or the completion prompt) so Ray's own `PrefixCacheAffinityRouter`
  can route the same calls, which is how the two are compared (docs/ray.md).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentrt.cluster.routing import RouteRequest
from agentrt.ray.blocks import chain, salt_seed
from agentrt.serve.auth import Salts, default_unsalted
from agentrt.serve.identity import forward_body, resolve_identity
from agentrt.serve.validate import (MAX_OUTPUT_TOKENS, RequestError, parse_body, validate_chat,
                                    validate_completion)

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
VALIDATORS = {CHAT: validate_chat, COMPLETIONS: validate_completion}
OUTPUT_FIELDS = ("max_completion_tokens", "max_tokens")
MAX_TOKEN_ID = 1 << 63          # token ids are hashed as signed 64-bit ints (`blocks.block_hash`)
OWN_TEMPLATE_KWARGS = ("conversation", "tools", "add_generation_prompt", "tokenize", "return_dict")


def tenant_salts(secret_file: str | None = None) -> Callable[[str], str | None]:
    """tenant -> cache_salt as `agentrt serve` without `--auth` salts: every named tenant its own
    namespace, the default tenant none. The secret: `secret_file`, else $AGENTRT_CACHE_SALT_SECRET,
    else generated (`Salts.from_sources`)."""
    return default_unsalted(Salts.from_sources(secret_file))


def output_tokens(body: dict) -> int:
    """The call's expected output (0: not given), after checking both output limits: a claim is
    added to a replica's live working set before vLLM judges it."""
    for name in OUTPUT_FIELDS:
        v = body.get(name)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, int):
            raise RequestError(f"'{name}' must be an integer", name)
        if not 0 <= v <= MAX_OUTPUT_TOKENS:
            raise RequestError(f"'{name}' must be between 0 and {MAX_OUTPUT_TOKENS}", name)
    out = body.get("max_completion_tokens") or body.get("max_tokens")
    return out or 0


def _check_token_ids(prompt: Any) -> None:
    if isinstance(prompt, list):
        for t in prompt:
            if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < MAX_TOKEN_ID:
                raise RequestError("'prompt' token ids must be integers in [0, 2^63)", "prompt")


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
    output_tokens: int = 0       # the body's checked output limit (0: not given)

    @property
    def messages(self) -> Any:
        return self.body.get("messages", self.body.get("prompt"))

    def route_request(self) -> RouteRequest:
        return RouteRequest(tenant=self.tenant, workflow=self.workflow, agent=self.agent,
                            hash_ids=self.hash_ids, prompt_tokens=self.prompt_tokens,
                            output_tokens=self.output_tokens, call_index=self.call_index,
                            last=self.end)


class CallPreparer:
    """Builds `AgentCall`s with the served model's tokenizer (loaded lazily from `tokenizer`,
    a local directory or an already-built tokenizer object). `salts`: tenant -> cache_salt
    (default `tenant_salts()`)."""

    def __init__(self, tokenizer: Any, block_size: int, max_workflows: int = 100_000,
                 salts: Callable[[str], str | None] | None = None) -> None:
        if block_size <= 0:
            raise ValueError(f"block_size must be > 0, got {block_size}")
        self._tokenizer = tokenizer
        self.block_size = block_size
        self.max_workflows = max_workflows
        self.salts = salts if salts is not None else tenant_salts()
        self._calls: OrderedDict[str, int] = OrderedDict()
        self._count = 0

    @property
    def tokenizer(self) -> Any:
        if isinstance(self._tokenizer, str):
            from transformers import AutoTokenizer
            self._tokenizer = AutoTokenizer.from_pretrained(self._tokenizer)
        return self._tokenizer

    def tokens(self, path: str, body: dict) -> list[int]:
        """The prompt's token ids, as vLLM tokenizes it; a body validated for `path` first."""
        if path == CHAT:
            return self._chat_tokens(body)
        prompt = body.get("prompt")
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)):
            for p in prompt:
                _check_token_ids(p)
            prompt = prompt[0]      # a batch of prompts is routed by its first
        if isinstance(prompt, list):
            _check_token_ids(prompt)
            return list(prompt)
        return list(self.tokenizer.encode(prompt or ""))

    def _chat_tokens(self, body: dict) -> list[int]:
        tools = body.get("tools")
        if tools is not None and not isinstance(tools, list):
            raise RequestError("'tools' must be an array", "tools")
        kwargs = body.get("chat_template_kwargs")
        if kwargs is not None and not isinstance(kwargs, dict):
            raise RequestError("'chat_template_kwargs' must be an object", "chat_template_kwargs")
        kwargs = {k: v for k, v in (kwargs or {}).items() if k not in OWN_TEMPLATE_KWARGS}
        try:
            ids = self.tokenizer.apply_chat_template(body["messages"], tools=tools,
                                                     add_generation_prompt=True, tokenize=True, **kwargs)
        except Exception as e:
            # the template runs on the client's messages: what it raises is the request's fault,
            # and vLLM answers the same request with a 400
            raise RequestError(f"the chat template cannot render 'messages': {e}", "messages") from None
        # transformers >= 5 returns a BatchEncoding here, older versions a list
        return list(ids["input_ids"] if hasattr(ids, "keys") else ids)

    def prepare_http(self, path: str, raw: bytes, content_type: str | None,
                     headers: Mapping[str, str]) -> AgentCall:
        """`prepare` for a raw HTTP body, parsed as `agentrt serve` parses it."""
        return self.prepare(path, parse_body(raw, content_type), headers)

    def prepare(self, path: str, body: dict, headers: Mapping[str, str]) -> AgentCall:
        """`headers`: any mapping with lower-case keys. Raises `serve.validate.RequestError`
        (a 400 naming the field) on a malformed body or identity."""
        VALIDATORS[path](body)
        out = output_tokens(body)
        ident = resolve_identity(headers, body, self._count + 1)
        tokens = self.tokens(path, body)
        self._count += 1
        salt = self.salts(ident.tenant)
        hash_ids = chain(tokens, self.block_size, salt_seed(salt))
        agent = ident.agent or (f"anchor:{hash_ids[0]:x}" if hash_ids else "anchor:none")
        index = self._calls.pop(ident.key, 0)
        if not ident.end:
            self._calls[ident.key] = index + 1
            while len(self._calls) > self.max_workflows:
                self._calls.popitem(last=False)
        forwarded = forward_body(body, ident, agent, index, salt)
        return AgentCall(path=path, body=forwarded, tenant=ident.tenant, workflow=ident.key,
                         agent=agent, end=ident.end, call_index=index, hash_ids=hash_ids,
                         prompt_tokens=len(tokens), output_tokens=out)

    def tracked_workflows(self) -> int:
        return len(self._calls)

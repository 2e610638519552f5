"""`agentrt serve --scheduler NAME`: the scheduler's ranking sent upstream as vLLM's `priority`.

Model
- One scheduler instance (`agentrt.sched`) sees the server's user calls: their arrival, then,
  when the response ends, their admission with the cached prefix the engine reported and their
  finish, and workflow ends (`X-Workflow-End` or the end route). Warm-ups are not shown to it.
- Units are the server's: a call's `input_length` is its prompt blocks times `block_chars`
  characters (`blocks.py`); output tokens count `CHARS_PER_TOKEN` characters each, and the cached
  prefix the engine reports (tokens) is turned into blocks by its share of the prompt's tokens.
  Priorities are therefore on the order of prompt characters; only their order matters.
- The cache view is the server's estimate (`view.CacheEstimate`): a prompt whose response ended
  counts as resident until the engine has computed a KV pool's worth of tokens since.
- The priority is computed once, at arrival (vLLM fixes it at submission; `vllm/priority.py`
  says what that cannot carry). With `fcfs` (the default) nothing is computed and the request's
  `priority` field passes through untouched, as before.
The upstream vLLM must run with `--scheduling-policy priority`; under its default `fcfs` the
priority is accepted and ignored.
"""

from __future__ import annotations

from dataclasses import replace

from agentrt.runtime import events as ev
from agentrt.serve.metrics import usage_tokens
from agentrt.serve.view import CacheEstimate
from agentrt.vllm.priority import PriorityFeeder

CHARS_PER_TOKEN = 4     # the bridge's own estimate when a response carries no usage


class ServeScheduler:
    def __init__(self, name: str = "fcfs", options: dict | None = None,
                 cache: CacheEstimate | None = None, block_chars: int = 256) -> None:
        from agentrt.sched.registry import make_scheduler
        self.name = name
        sched = make_scheduler(name, **(options or {}))      # AgentrtError on a bad name or option
        self.active = bool(sched.reorders)
        self.feeder = PriorityFeeder(sched) if self.active else None
        self.cache = cache or CacheEstimate(0)
        self.block_chars = block_chars

    def _cached(self, call: ev.CallInfo) -> int:
        return self.cache.gpu_prefix(call.tenant, call.hash_ids)

    def arrive(self, info: ev.CallInfo, now: float) -> tuple[ev.CallInfo, int]:
        """(the scheduler's own copy of the call, its priority). The copy keeps the runtime's
        `CallInfo` untouched when the finish fills in the real output length."""
        mine = replace(info, extra=dict(info.extra))
        return mine, self.feeder.arrive(mine, now, self._cached)

    def done(self, info: ev.CallInfo, now: float, ok: bool, usage: dict | None) -> None:
        """The call's response ended. A failed call only finishes (no service counted); a
        successful one without usage (a stream without `include_usage`) counts as uncached."""
        prompt, cached = usage_tokens(usage)
        n = len(info.hash_ids)
        hit = int(n * min(1.0, cached / prompt)) if prompt else 0
        out = usage.get("completion_tokens") if isinstance(usage, dict) else None
        out = out * CHARS_PER_TOKEN if isinstance(out, int) else 0
        self.feeder.done(info, now, hit, out, admitted=ok)

    def workflow_ended(self, workflow: str, tenant: str, now: float) -> None:
        self.feeder.workflow_ended(workflow, tenant, now)

    def stats(self) -> dict:
        if self.feeder is None:
            return {"scheduler": self.name, "sends_priority": False}
        return dict(self.feeder.stats(), sends_priority=True)

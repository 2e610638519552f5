"""Prompts being computed: which waiting call would find its prefix cached if it waited.

The simulator, like SGLang's radix cache, puts a prompt's blocks in the prefix cache when its
prefill completes, so two calls that share a prefix and are admitted before either has finished
both compute it (vLLM V1 caches blocks when they are scheduled, so there they share already:
docs/engine.md). Agent applications send such calls together: parallel instances of one agent
forked from one history (a fan-out), or several agents starting on the same task. A scheduler
that holds the second until the first's prompt is cached saves the shared prefill, and the held
call loses little: the shared prefix is computed once either way, and in a chunked-prefill
engine two copies of it would split the same iteration budget.

The set is fed by engine events: a call enters at `CallAdmitted` and leaves at `PromptCached`,
or at `CallFinished` if it never got there (oversize, failed). It counts, per tenant, the full
prompt blocks of the calls in it, so at most the blocks of the calls running. Since ids are
chained (an id stands for its whole prefix), a waiting call whose first `cached` blocks are
resident gains from waiting exactly when its next block is being computed: one lookup. A call
preempted while prefilling stays in the set until its prompt is cached on its second try;
schedulers bound every hold (`max_wait_s`), so nothing waits on it for good.
"""

from __future__ import annotations

from agentrt.runtime import events as ev


class InflightPrefixes:
    __slots__ = ("_ids", "_calls")

    def __init__(self) -> None:
        self._ids: dict[str, dict[int, int]] = {}        # tenant -> block id -> calls computing it
        self._calls: dict[int, ev.CallInfo] = {}          # rid -> call

    def __len__(self) -> int:
        return len(self._calls)

    def observe(self, e) -> None:
        t = type(e)
        if t is ev.CallAdmitted:
            c = e.call
            if c.warmup or c.n_full == 0 or c.rid in self._calls:
                return
            self._calls[c.rid] = c
            ids = self._ids.setdefault(c.tenant, {})
            for h in c.hash_ids[:c.n_full]:
                ids[h] = ids.get(h, 0) + 1
        elif t is ev.PromptCached or t is ev.CallFinished:
            c = self._calls.pop(e.call.rid, None)
            if c is not None:
                ids = self._ids[c.tenant]
                for h in c.hash_ids[:c.n_full]:
                    n = ids[h] - 1
                    if n:
                        ids[h] = n
                    else:
                        del ids[h]
                if not ids:
                    del self._ids[c.tenant]

    def computing_next(self, call: ev.CallInfo, cached: int) -> bool:
        """Whether a prompt being computed holds `call`'s block after its first `cached` (so
        waiting for it would extend the call's cached prefix)."""
        if cached >= call.n_full:
            return False
        ids = self._ids.get(call.tenant)
        return ids is not None and call.hash_ids[cached] in ids

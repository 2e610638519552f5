"""Hand-built calls and a fake queue view for the scheduler unit tests."""

from __future__ import annotations

from agentrt.runtime import events as ev

BS = 16


def info(rid, wf="w", tenant="t", n_in=4 * BS, n_out=10, ids=None, agent=None, warmup=False, index=0):
    ids = list(ids) if ids is not None else [rid * 100 + k for k in range(n_in // BS)]
    return ev.CallInfo(rid=rid, workflow=wf, agent=agent, tenant=tenant, index=index, hash_ids=ids,
                       input_length=n_in, output_length=n_out, block_size=BS, warmup=warmup)


class View:
    """A fake `QueueView`: `cached[rid]` resident prompt blocks, at time `now`; a pool of
    `capacity_blocks` of which running requests hold `reserved_blocks`, `requests` in the engine,
    and a prefill costing `prefill_s_per_token` seconds a token."""

    def __init__(self, now=0.0, cached=None, capacity_blocks=10**9, reserved_blocks=0, requests=1,
                 prefill_s_per_token=0.0):
        self.now = now
        self.cached = dict(cached or {})
        self.asked = []
        self.capacity_blocks = capacity_blocks
        self.reserved_blocks = reserved_blocks
        self.requests = requests
        self.prefill_s_per_token = prefill_s_per_token

    def prefill_seconds(self, tokens):
        return tokens * self.prefill_s_per_token

    def cached_blocks(self, call):
        self.asked.append(call.rid)
        return self.cached.get(call.rid, 0)

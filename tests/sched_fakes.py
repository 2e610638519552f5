"""Hand-built calls and a fake queue view for the scheduler unit tests."""

from __future__ import annotations

from agentrt.runtime import events as ev

BS = 16


def info(rid, wf="w", tenant="t", n_in=4 * BS, n_out=10, ids=None, agent=None, warmup=False, index=0):
    ids = list(ids) if ids is not None else [rid * 100 + k for k in range(n_in // BS)]
    return ev.CallInfo(rid=rid, workflow=wf, agent=agent, tenant=tenant, index=index, hash_ids=ids,
                       input_length=n_in, output_length=n_out, block_size=BS, warmup=warmup)


class View:
    """A fake `QueueView`: `cached[rid]` resident prompt blocks, at time `now`."""

    def __init__(self, now=0.0, cached=None):
        self.now = now
        self.cached = dict(cached or {})
        self.asked = []

    def cached_blocks(self, call):
        self.asked.append(call.rid)
        return self.cached.get(call.rid, 0)

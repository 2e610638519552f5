"""The connector executing a request's standard KV hints: `kv.retain` and `vllm.set_priority`.

When: at the request's finish (`request_finished`, before vLLM frees its blocks), as vLLM's
kv_hints dispatch applies actions deferred to completion: a request that finished by stopping
or reaching its length has its hints applied, an aborted or failed one has them dropped
(counted as `aborted`). Hints read at arrival (`stdhints.py`) wait in the hosted runtime until
then; nothing is applied while the request runs (its blocks are in use, never evicted anyway).
To what: the blocks the request leaves cached, first to last, as the mirror maps them (up to
the first that is not: a partial last block, a block vLLM did not cache): token t of the request
is in block t // block_size. `kv.retain` takes the spans of its directives (`covers_output`: from
the prompt's length on); `vllm.set_priority` all of those blocks ("request_cached"). The owner
is the request's tenant (from its identity: serve sets it from the API key) with the hint's scope,
else the request's workflow; or the claim id. The ledger (`runtime/retention.py`) applies them
within the budget and counts every outcome.
"""

from __future__ import annotations

from agentrt.runtime.floor import owner_name
from agentrt.runtime.retention import Retention


def apply(led: Retention, mirror, request, idt, hints, block_ids: list[int], block_size: int,
          now: float) -> list[str]:
    """Apply `hints` (a `kvhints.Hints` with standard actions) of a finished vLLM `request` of
    identity `idt`; returns the outcomes, one per hint."""
    status = getattr(request, "status", None)
    status = str(getattr(status, "name", status))
    if "ABORT" in status or "ERROR" in status:
        return [led.reject("aborted") for _ in range((hints.retain is not None) + len(hints.claims))]
    nodes = []
    for b in block_ids:
        n = mirror.by_block.get(b)
        if n is None:
            break
        nodes.append(n)
    out = []
    if hints.retain is not None:
        out.append(led.retain(idt.tenant, owner_name(hints.retain.scope, idt.workflow), nodes,
                              hints.retain.spans, block_size, request.num_prompt_tokens, now))
    out.extend(led.claim(idt.tenant, c, nodes, now) for c in hints.claims)
    return out

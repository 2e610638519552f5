"""An agentrt scheduler's ranking carried into vLLM as each request's `priority`.

vLLM 0.32 (`vllm/v1/core/sched/scheduler.py`, `request_queue.py`) with `--scheduling-policy
priority` keeps its waiting queue as a heap on (priority, arrival time, request id): lower
priority first, ties in arrival order. The head of that order blocks the rest when it does not
fit in free KV memory (no backfill). When a running request cannot grow, the running request
with the largest (priority, arrival time) is preempted and goes back to the waiting heap. The
priority comes from the OpenAI request body's integer `priority` (default 0, int64) or, winning
over the body, from the `X-Vllm-Priority` header. Under the default `--scheduling-policy fcfs`
the field is accepted and ignored.

A priority is fixed when the request is submitted, so it cannot carry what an agentrt
`Scheduler` does after submission: `max_wait_s` (vLLM re-ranks nothing), backfill past a
blocked head (`skips_blocked`), holding new workflows back (`defer`, `max_hold_s`), the prefill
order inside a batch (`batch_key`), and the `fair` scheduler's KV-cache shares. That is why
`agentrt serve --scheduler NAME` holds calls in its own admission gate and releases them in the
scheduler's order while vLLM has room (`serve/gate.py`); each released call also carries
`Scheduler.priority` (the leading number of its sort key, rounded), which vLLM under
`--scheduling-policy priority` uses for the calls that do wait in its queue and to pick the
lowest-ranked running request to preempt.
"""

from __future__ import annotations

SCHEDULING_POLICY_ARGS = ("--scheduling-policy", "priority")   # the vLLM server flag this needs
PRIORITY_HEADER = "x-vllm-priority"                              # vLLM reads it before the body
WARMUP_PRIORITY = 2 ** 62                                        # after every user call
INT64 = (-(2 ** 63), 2 ** 63 - 1)


def needs_priority(scheduler: str) -> bool:
    """Whether `scheduler` orders calls other than by arrival (vLLM must run `priority`)."""
    from agentrt.sched.registry import make_scheduler
    return bool(make_scheduler(scheduler).reorders)

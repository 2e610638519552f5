"""Replay a workflow trace against a live OpenAI-compatible engine, closed loop, measured at the client.

- Arrivals come from the simulator's `WorkflowReplay` driven by the wall clock: a workflow's
  next call is issued when the calls it waits on have finished plus its think time; with a
  concurrency N at most N workflows run at once. `time_scale` stretches trace timestamps (as in
  the simulator), `think_scale` scales think times (a live run takes real time).
- Each call is one streamed `/v1/completions` request whose prompt is token ids (`render.py`),
  with `max_tokens` = the scaled output length, `ignore_eos` (a random model would stop early),
  temperature 0, and the call's identity in `vllm_xargs` (`agentrt.wire.identity`).
- Measured per call: TTFT (request sent -> first streamed token), end-to-end latency, prompt and
  cached tokens from the response's usage, and its stream's stalls: the waits longer than
  `SLOW_GAP_S` between two streamed chunks after the first (how many, how long in all), the
  client's side of vLLM's inter-token histogram (`summary.token_stalls`). Per workflow: first
  issue -> last finish. `write_calls` keeps each call's record with its wall-clock send time,
  which joins it with the engine's own logs (`agentrt.enginebench.call_path`).
- Live answers: with the renderer's `live_outputs` each request asks for its generated token ids
  (`return_token_ids`), and a finished call's answer is handed to the renderer, so later prompts
  that carry it (the trace's `output_hash_ids`) send the tokens the engine generated.
Through `agentrt serve` (`front.py`: a scheduler's admission gate), the identity goes as serve's
headers (`X-Workflow-Id`, `X-Agent-Id`, `X-Tenant-Id`, `X-Workflow-End` on a workflow's last
call), as a framework sends it; serve adds the engine's forms (kv_hints, `vllm_xargs`). A client
cannot send kv_hints through serve, so a call's tool call is not announced to the engine there.
A failed request is recorded with its error and still releases its workflow's successors, so one
failure never stalls the replay.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from agentrt.engine.replay import WorkflowReplay
from agentrt.engine.tool_hints import ToolHints
from agentrt.enginebench.prom import SLOW_GAP_S
from agentrt.enginebench.render import Renderer
from agentrt.trace.schema import Call
from agentrt.wire.identity import xargs_for
from agentrt.wire.kvhints import agentrt_actions, envelope

if TYPE_CHECKING:
    import httpx


@dataclass(slots=True)
class CallResult:
    workflow: str
    call: int
    prompt_tokens: int
    cached_tokens: int
    output_tokens: int
    ttft_s: float | None
    latency_s: float
    error: str | None = None
    tenant: str = "default"
    generated: list[int] | None = None     # the answer's token ids (live answers only; dropped once used)
    sent_at: float | None = None           # perf_counter() when the request was sent
    sent_wall: float | None = None         # time.time() then (to join with the engine's own logs)
    stalls: int = 0                        # waits > SLOW_GAP_S between streamed chunks
    stalled_s: float = 0.0                 # their total


@dataclass(slots=True)
class ReplayResult:
    calls: list[CallResult] = field(default_factory=list)
    e2e: list[float] = field(default_factory=list)
    workflows: int = 0
    first_issue: float | None = None
    last_finish: float = 0.0

    @property
    def errors(self) -> int:
        return sum(1 for c in self.calls if c.error)


CALL_FIELDS = ("workflow", "call", "tenant", "sent_wall", "ttft_s", "latency_s", "prompt_tokens",
               "cached_tokens", "output_tokens", "error")


def write_calls(path, calls: list[CallResult]) -> None:
    """One JSON line per call (`CALL_FIELDS`), in the order they finished."""
    with open(path, "w") as f:
        for r in calls:
            f.write(json.dumps({k: getattr(r, k) for k in CALL_FIELDS}) + "\n")


def tool_calls(calls: list[Call]) -> dict[tuple[str, int], float]:
    """Calls whose successor waits on a tool (a later call lists it in `after` with think time),
    with the shortest such wait in ms (what the simulator's replay reports as the tool wait)."""
    out: dict[tuple[str, int], float] = {}
    for c in calls:
        if c.think_ms > 0:
            for a in c.after:
                key = (c.workflow, a)
                out[key] = min(out.get(key, c.think_ms), c.think_ms)
    return out


def scale_think(calls: list[Call], think_scale: float) -> list[Call]:
    if think_scale == 1.0:
        return calls
    return [replace(c, think_ms=c.think_ms * think_scale) for c in calls]


def serve_headers(c: Call) -> dict[str, str]:
    """The call's identity as `agentrt serve` reads it (what a framework sends)."""
    h = {"x-workflow-id": c.workflow, "x-tenant-id": c.tenant, "x-workflow-end": "true" if c.last else "false"}
    if c.agent:
        h["x-agent-id"] = c.agent
    return h


async def _one(client: httpx.AsyncClient, url: str, model: str, c: Call, prompt: list[int],
               max_tokens: int, tool_call: bool, expected_s: float | None = None,
               token_ids: bool = False, front: bool = False) -> CallResult:
    """One call, streamed; `expected_s`: the tool time it announces (an `agentrt.tool_call` kv_hint);
    `token_ids`: collect the answer's token ids (vLLM's `return_token_ids`); `front`: through
    `agentrt serve`, identity in its headers."""
    import httpx
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    headers = serve_headers(c) if front else None
    if not front:
        body["vllm_xargs"] = xargs_for(c.workflow, c.agent, c.tenant, c.call, bool(c.last), tool_call)
    generated: list[int] | None = [] if token_ids else None
    if token_ids:
        body["return_token_ids"] = True
    if expected_s is not None and not front:
        body["kv_transfer_params"] = {"kv_hints": envelope(
            agentrt_actions(tool_call=True, expected_s=expected_s), f"{c.workflow}/{c.call}")}
    t0 = time.perf_counter()
    wall = time.time()
    ttft = None
    usage = None
    last = None
    stalls, stalled = 0, 0.0
    try:
        async with client.stream("POST", url, json=body, headers=headers) as r:
            if r.status_code != 200:
                text = (await r.aread()).decode(errors="replace")[:300]
                raise RuntimeError(f"HTTP {r.status_code}: {text}")
            async for line in r.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                msg = json.loads(data)
                choices = msg.get("choices")
                if choices:
                    now = time.perf_counter()
                    if ttft is None:
                        ttft = now - t0
                    elif now - last > SLOW_GAP_S:
                        stalls += 1
                        stalled += now - last
                    last = now
                if generated is not None and choices:
                    generated.extend(choices[0].get("token_ids") or ())
                if msg.get("usage"):
                    usage = msg["usage"]
    except (httpx.HTTPError, RuntimeError, json.JSONDecodeError) as e:
        return CallResult(c.workflow, c.call, len(prompt), 0, 0, None,
                          time.perf_counter() - t0, error=repr(e)[:300], tenant=c.tenant, sent_at=t0,
                          sent_wall=wall)
    lat = time.perf_counter() - t0
    usage = usage or {}
    details = usage.get("prompt_tokens_details") or {}
    return CallResult(c.workflow, c.call, int(usage.get("prompt_tokens", len(prompt))),
                      int(details.get("cached_tokens") or 0), int(usage.get("completion_tokens", 0)),
                      ttft, lat, tenant=c.tenant, generated=generated, sent_at=t0, sent_wall=wall,
                      stalls=stalls, stalled_s=stalled)


async def replay(base_url: str, model: str, calls: list[Call], renderer: Renderer,
                 concurrency: int | None, time_scale: float = 1.0, think_scale: float = 1.0,
                 progress: Callable[[int], None] | None = None,
                 client: httpx.AsyncClient | None = None,
                 tool_hints: ToolHints | None = None, front: bool = False) -> ReplayResult:
    """Replay `calls` against the server (`front`: an `agentrt serve` in front of vLLM); with
    `tool_hints`, a call its successor waits on a tool after announces that wait (think times
    scaled by `think_scale`), as the simulator does."""
    import httpx
    tools = tool_calls(calls)
    calls = scale_think(calls, think_scale)
    rp = WorkflowReplay(iter(calls), concurrency, time_scale)
    res = ReplayResult()
    url = base_url + "/v1/completions"
    own = client is None
    if own:
        client = httpx.AsyncClient(timeout=httpx.Timeout(1800.0, connect=30.0),
                                   limits=httpx.Limits(max_connections=1024))
    loop = asyncio.get_running_loop()
    start = loop.time()
    pending: dict[asyncio.Task, tuple[Call, list[int]]] = {}
    try:
        while True:
            now = loop.time() - start
            for _, c in rp.pop_arrivals(now):
                if res.first_issue is None:
                    res.first_issue = now
                wait_ms = tools.get((c.workflow, c.call))
                expected = (tool_hints.estimate(c.workflow, c.call, wait_ms * think_scale * 1e-3)
                            if tool_hints is not None and wait_ms is not None else None)
                prompt = renderer.render(c)
                task = asyncio.ensure_future(_one(client, url, model, c, prompt,
                                                  renderer.output_tokens(c),
                                                  wait_ms is not None, expected,
                                                  token_ids=renderer.live_outputs and bool(c.output_hash_ids),
                                                  front=front))
                pending[task] = (c, prompt)
            nxt = rp.next_arrival()
            if not pending and nxt is None:
                break
            timeout = None if nxt is None else max(0.0, nxt - (loop.time() - start))
            if pending:
                done, _ = await asyncio.wait(pending, timeout=timeout,
                                             return_when=asyncio.FIRST_COMPLETED)
            else:
                await asyncio.sleep(timeout or 0.0)
                done = set()
            for task in done:
                c, prompt = pending.pop(task)
                r = task.result()
                if r.generated is not None:
                    if r.error is None:
                        renderer.record_output(c, prompt, r.generated)
                    r.generated = None
                fin = loop.time() - start
                res.calls.append(r)
                res.last_finish = max(res.last_finish, fin)
                _, ended = rp.finish(c, fin)
                if ended is not None:
                    res.workflows += 1
                    first = ended.first_arrival if ended.first_arrival is not None else fin
                    res.e2e.append(fin - first)
                if progress is not None:
                    progress(1)
    finally:
        for task in pending:
            task.cancel()
        if own:
            await client.aclose()
    return res

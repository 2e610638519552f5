"""Warm-ups through `agentrt serve`: agent B's cached prompt tokens with and without them.

Starts two `agentrt serve` apps in this process in front of your vLLM (one with `lru`, which never
warms, one with `cachesage`) and runs the same scenario through each, with prompts of its own:
- workflows 1 and 2 call agent A, then agent B (X-Workflow-End on B), so CacheSage learns A -> B
  and B's system prompt (its anchor);
- filler completions push more tokens through the engine than its KV pool holds, which evicts
  B's prefix under vLLM's LRU;
- workflow 3 calls A, then "thinks" (the cachesage server warms B's anchor meanwhile, a
  max_tokens=1 request), then calls B.
Prints B's `cached_tokens` in workflow 3 and the warm-ups each server sent. The vLLM server needs
--enable-prompt-tokens-details (cached_tokens) and prefix caching (on by default).

    python examples/serve_warmup_demo.py --upstream http://127.0.0.1:8001 --model MODEL
"""

from __future__ import annotations

import argparse
import random
import socket
import threading
import time

import httpx

WORDS = ("the agent plans tasks and writes code while a reviewer checks tests for errors in every "
         "module before release of data files with cache tokens").split()


def words(seed, n: int) -> str:
    r = random.Random(seed)
    return " ".join(r.choice(WORDS) for _ in range(n))


def scenario(base_url: str, model: str, tag: str, wait_for_warmup: bool, think_s: float = 1.0,
             timeout_s: float = 30.0) -> dict:
    """Run the scenario through one server; returns B's cached tokens in workflow 3 and the
    server's state and metrics afterwards."""
    sys_a = f"[{tag}] You are agent A, the planner. " + words(tag + "A", 150)
    sys_b = f"[{tag}] You are agent B, the coder. " + words(tag + "B", 150)
    c = httpx.Client(base_url=base_url, timeout=300)

    def call(agent: str, wf: str, system: str, end: bool = False) -> int:
        h = {"X-Agent-Id": agent, "X-Workflow-Id": f"{tag}-{wf}", "X-Workflow-End": str(end).lower()}
        body = {"model": model, "max_tokens": 4, "temperature": 0,
                "messages": [{"role": "system", "content": system},
                             {"role": "user", "content": f"{wf}: " + words(tag + wf + agent, 20)}]}
        r = c.post("/v1/chat/completions", headers=h, json=body)
        r.raise_for_status()
        return r.json()["usage"]["prompt_tokens_details"]["cached_tokens"]

    for wf in ("wf1", "wf2"):
        call("A", wf, sys_a)
        call("B", wf, sys_b, end=True)
    capacity = c.get("/agentrt/state").json()["kv_capacity_tokens"] or 4096
    pushed, k = 0, 0
    while pushed < 1.5 * capacity:          # evict B's prefix: more tokens than the pool holds
        r = c.post("/v1/completions", json={"model": model, "prompt": words(f"{tag}fill{k}", 800),
                                            "max_tokens": 1})
        r.raise_for_status()
        pushed += r.json()["usage"]["prompt_tokens"]
        k += 1
    call("A", "wf3", sys_a)
    t0 = time.time()
    while wait_for_warmup:                   # A's caller thinks until the server has warmed B
        st = c.get("/agentrt/state").json()
        if st["warmups_sent"] >= 1 and not st["warming"]:
            break
        if time.time() - t0 > timeout_s:
            raise TimeoutError(f"no warm-up within {timeout_s} s: {st}")
        time.sleep(0.1)
    time.sleep(max(0.0, think_s - (time.time() - t0)))
    b_cached = call("B", "wf3", sys_b, end=True)
    return {"b_cached": b_cached, "filler_tokens": pushed, "state": c.get("/agentrt/state").json(),
            "metrics": c.get("/metrics").text}


def start_server(upstream: str, policy: str):
    """`agentrt serve` in a thread of this process; returns (base URL, uvicorn server)."""
    import uvicorn

    from agentrt.serve.app import ServeConfig, create_app
    from agentrt.serve.server import uvicorn_config
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    app = create_app(ServeConfig(upstream, policy, act_interval_s=0.1))
    server = uvicorn.Server(uvicorn_config(app, "127.0.0.1", port, "warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    return f"http://127.0.0.1:{port}", server


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--upstream", required=True, help="your vLLM server, e.g. http://127.0.0.1:8001")
    ap.add_argument("--model", required=True)
    args = ap.parse_args()
    tag = f"demo{time.time_ns() % 10**8}"
    print(f"{'policy':10s} {'B cached (wf3)':>15s} {'B prompt':>9s} {'warm-ups':>9s} "
          f"{'warm-up prompt tok':>19s} {'filler tok':>11s}")
    for policy in ("lru", "cachesage"):
        url, server = start_server(args.upstream, policy)
        try:
            r = scenario(url, args.model, f"{tag}{policy}", wait_for_warmup=policy == "cachesage")
        finally:
            server.should_exit = True
        calls = [x for x in r["state"]["recent"] if not x["warmup"]]
        warm = [x for x in r["state"]["recent"] if x["warmup"]]
        print(f"{policy:10s} {r['b_cached']:15d} {calls[-1]['prompt_tokens']:9d} {len(warm):9d} "
              f"{sum(x['prompt_tokens'] or 0 for x in warm):19d} {r['filler_tokens']:11d}")


if __name__ == "__main__":
    main()

"""Hit rate of each request router on a small multi-workflow run through Ray Serve and live vLLM.

    python -m agentrt.ray.bench --routers ray:pow2,ray:prefix-affinity,session,prefix,agent

Model
- Two (`--replicas`) vLLM servers of the tiny local model start once, with prefix caching, KV
  events and a small KV pool (`--num-blocks` blocks of 32 tokens each) so placement decides what
  stays cached. Every router then serves the same workload through the same Serve application
  (ingress + `VLLMReplica`s attached to those servers, `deploy.py`), after vLLM's prefix caches
  are emptied (`/reset_prefix_cache`, the servers run with VLLM_SERVER_DEV_MODE=1).
- Workload: `--workflows` workflows, `--concurrency` of them at a time; each is `--steps` calls
  by its agents (planner once, then the coder three times and the tester twice, each looping on
  its tool; a long system prompt each, shared by every workflow). A call's prompt is its agent's system prompt, the workflow's task and the
  workflow's transcript so far, so an agent's next call extends its previous one; between calls
  the workflow waits a seeded "tool" pause. Texts are seeded, so every router sees the same
  prompts; arrival interleaving depends on timing, so repeat (`--repeat`) to see the spread.
- Measured from vLLM's responses: token hit rate (sum of `cached_tokens` / sum of prompt tokens),
  the same over follow-up calls only (an agent's second and later calls of a workflow), and the
  share of follow-ups that landed on the replica of that agent's previous call; load imbalance
  is max/mean calls per replica.
Needs the `ray` and `vllm` extras. Everything runs on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import threading
import time
import urllib.request
from dataclasses import dataclass, field

AGENTS = ("planner", "coder", "tester")
# who makes each call of a workflow: the coder and the tester loop on their tools
SCHEDULE = ("planner", "coder", "coder", "coder", "tester", "tester")
WORDS = ("self return import module class value index buffer parse token stream error result "
         "config handler request response cache block thread worker queue event update state "
         "format string number list dict field test assert patch commit branch merge").split()


@dataclass(slots=True)
class RunResult:
    router: str
    repeat: int
    calls: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    follow_prompt: int = 0
    follow_cached: int = 0
    follows: int = 0
    followed: int = 0
    per_replica: dict = field(default_factory=dict)
    wall_s: float = 0.0

    def summary(self) -> dict:
        loads = list(self.per_replica.values()) or [0]
        return {"router": self.router, "repeat": self.repeat, "calls": self.calls,
                "hit_rate": round(self.cached_tokens / max(1, self.prompt_tokens), 4),
                "follow_hit_rate": round(self.follow_cached / max(1, self.follow_prompt), 4),
                "followed_home": round(self.followed / max(1, self.follows), 4),
                "imbalance": round(max(loads) / max(1e-9, statistics.mean(loads)), 3),
                "wall_s": round(self.wall_s, 1)}


def _text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def workload(n: int, steps: int, seed: int) -> tuple[dict, list[dict]]:
    rng = random.Random(seed)
    systems = {a: f"You are the {a} of a software team. " + _text(rng, 160) for a in AGENTS}
    flows = [{"id": f"wf-{i}", "task": f"Task {i}: " + _text(rng, 120),
              "turns": [(_text(rng, 30), _text(rng, 30)) for _ in range(steps)],
              "pauses": [rng.uniform(0.0, 0.3) for _ in range(steps)]} for i in range(n)]
    return systems, flows


def _post(url: str, body: dict, headers: dict) -> tuple[dict, dict]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json", **headers})
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.loads(r.read()), {k.lower(): v for k, v in r.headers.items()}


def run_workload(url: str, systems: dict, flows: list[dict], concurrency: int, res: RunResult) -> None:
    lock = threading.Lock()
    todo = list(flows)

    def one(flow: dict) -> None:
        history: list[dict] = []
        home: dict[str, str] = {}
        for step, (said, tool) in enumerate(flow["turns"]):
            agent = SCHEDULE[step % len(SCHEDULE)]
            msgs = [{"role": "system", "content": systems[agent]},
                    {"role": "user", "content": flow["task"]}, *history]
            out, hdr = _post(url, {"model": "agentrt", "messages": msgs, "max_tokens": 4},
                             {"x-workflow-id": flow["id"], "x-agent-id": agent,
                              "x-workflow-end": "true" if step == len(flow["turns"]) - 1 else "false"})
            usage = out["usage"]
            cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
            replica = hdr["x-agentrt-replica"]
            with lock:
                res.calls += 1
                res.prompt_tokens += usage["prompt_tokens"]
                res.cached_tokens += cached
                res.per_replica[replica] = res.per_replica.get(replica, 0) + 1
                if agent in home:
                    res.follows += 1
                    res.followed += home[agent] == replica
                    res.follow_prompt += usage["prompt_tokens"]
                    res.follow_cached += cached
            home[agent] = replica
            history += [{"role": "assistant", "content": f"[{agent}] {said}"},
                        {"role": "user", "content": f"tool output: {tool}"}]
            time.sleep(flow["pauses"][step])

    def worker() -> None:
        while True:
            with lock:
                if not todo:
                    return
                flow = todo.pop(0)
            one(flow)

    t0 = time.time()
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    res.wall_s = time.time() - t0


def bound(model: str, systems: dict, flows: list[dict], block_size: int = 32) -> float:
    """Token hit rate with one infinite cache, workflows one after another: every prompt block
    seen before (the agents' shared system prompts, the workflow's earlier calls) is a hit."""
    from agentrt.ray.call import CHAT, CallPreparer
    prep = CallPreparer(model, block_size)
    seen: set[int] = set()
    hit = total = 0
    for flow in flows:
        history: list[dict] = []
        for step, (said, tool) in enumerate(flow["turns"]):
            agent = SCHEDULE[step % len(SCHEDULE)]
            msgs = [{"role": "system", "content": systems[agent]},
                    {"role": "user", "content": flow["task"]}, *history]
            call = prep.prepare(CHAT, {"messages": msgs}, {"x-workflow-id": flow["id"]})
            n = 0
            while n < len(call.hash_ids) and call.hash_ids[n] in seen:
                n += 1
            hit += n * block_size
            total += call.prompt_tokens
            seen.update(call.hash_ids)
            history += [{"role": "assistant", "content": f"[{agent}] {said}"},
                        {"role": "user", "content": f"tool output: {tool}"}]
    return hit / max(1, total)


def calibrate(url: str) -> float:
    """Prefill tokens per second of one engine: a long uncached prompt, one output token (the
    HTTP round trip included, so a slight underestimate)."""
    rng = random.Random(12345)
    best = 0.0
    for _ in range(2):
        body = {"model": "agentrt", "max_tokens": 1,
                "messages": [{"role": "user", "content": _text(rng, 700)}]}
        t0 = time.time()
        out, _ = _post(url + "/v1/chat/completions", body, {})
        best = max(best, out["usage"]["prompt_tokens"] / (time.time() - t0))
    print(f"prefill speed: {best:.0f} tokens/s", flush=True)
    return best


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--routers", default="ray:pow2,ray:prefix-affinity,session,prefix,agent")
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--workflows", type=int, default=8)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--num-blocks", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model", default=None, help="model directory (default: the tiny local model)")
    ap.add_argument("--prefill-tps", type=float, default=0.0,
                    help="engine prefill speed for the routers' cost model (default: measured)")
    ap.add_argument("--json", default=None, help="write the results here")
    a = ap.parse_args(argv)

    from ray import serve

    from agentrt.ray.deploy import EngineSpec, build_app, local_ray
    from agentrt.local.launch import VLLMServer, free_port
    from agentrt.local.model import build_model, default_model_dir

    model = a.model or str(build_model(default_model_dir("tiny"), "tiny"))
    work = f"/tmp/agentrt-ray-bench-{os.getpid()}"
    os.makedirs(work, exist_ok=True)
    servers, ups = [], []
    try:
        for i in range(a.replicas):
            ep = f"ipc://{work}/kv-{i}.sock"
            cfg = {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": ep}
            servers.append(VLLMServer(model, num_blocks=a.num_blocks, served_name="agentrt",
                                      extra_args=["--kv-events-config", json.dumps(cfg)],
                                      extra_env={"VLLM_SERVER_DEV_MODE": "1"},
                                      log_path=f"{work}/vllm-{i}.log"))
            ups.append({"url": servers[-1].base_url, "kv_events": ep, "block_size": 32,
                        "num_blocks": a.num_blocks})
        for s in servers:
            s.start()
        speed = a.prefill_tps or calibrate(servers[0].base_url)
        port = free_port()
        local_ray(num_cpus=2, http_port=port)
        spec = EngineSpec(model=model, num_blocks=a.num_blocks, upstreams=ups,
                          prefill_tokens_per_s=speed)
        systems, flows = workload(a.workflows, a.steps, a.seed)
        ceiling = bound(model, systems, flows)
        print(f"infinite-cache bound: hit rate {ceiling:.4f}", flush=True)
        results = []
        for rep in range(a.repeat):
            for router in a.routers.split(","):
                for s in servers:
                    urllib.request.urlopen(urllib.request.Request(s.base_url + "/reset_prefix_cache",
                                                                  method="POST"), timeout=30).read()
                serve.run(build_app(spec, replicas=a.replicas, router=router), name="agentrt-bench",
                          route_prefix="/")
                res = RunResult(router, rep)
                run_workload(f"http://127.0.0.1:{port}/v1/chat/completions", systems, flows,
                             a.concurrency, res)
                serve.delete("agentrt-bench")
                results.append(res.summary())
                print(json.dumps(results[-1]), flush=True)
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"args": vars(a), "prefill_tokens_per_s": round(speed),
                           "infinite_cache_hit_rate": round(ceiling, 4), "results": results},
                          f, indent=1)
        return results
    finally:
        try:
            import ray
            serve.shutdown()
            ray.shutdown()
        except Exception:
            pass
        for s in servers:
            s.stop()


if __name__ == "__main__":
    main()

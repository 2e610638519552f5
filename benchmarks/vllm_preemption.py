"""Preempted requests on a live vLLM: does the prefix a preempted request computed survive until it runs again?

    python -m benchmarks.vllm_preemption                  # both scenarios, 3 rounds each (about 6 min on 2 cores)
    python -m benchmarks.vllm_preemption --scenario stream --rounds 5 --label NAME
    python -m benchmarks.vllm_preemption --docs-only      # rebuild the docs table from the JSON

vLLM preempts a running request when a step needs blocks and too few are free: it frees the
request's blocks to the tail of its free queue (under its own LRU they go after every block freed
before them, before every block freed after) and queues the request to run again, with prefix
hits on whatever of its blocks survived. The tiny local model, a pool of `BLOCKS` blocks of 32
tokens, random prompts (no request shares a prefix with another), outputs forced to full length
(`ignore_eos`); every prefix hit a preempted request finds is its own blocks.
- `burst` (vLLM's default FCFS scheduling): `BURST` requests at once, `PROMPT` prompt and
  `OUTPUT` generated tokens each. The prompts fit, the outputs do not: when a decode step finds
  no free block vLLM preempts the latest admitted request, whose blocks are then the only free
  ones, so the growing requests take them under any order.
- `stream` (`--scheduling-policy priority`, as agentrt's schedulers run on vLLM): one long
  low-priority request (`LONG_PROMPT` + `LONG_OUTPUT` tokens, a live workflow) starts, then
  `STREAM` short high-priority requests (`SHORT_PROMPT` + `SHORT_OUTPUT` tokens, each its own
  ended workflow) pass `STREAM_CONCURRENCY` at a time. As they grow vLLM preempts the long one
  (the lowest priority); the short ones keep being admitted ahead of it and their allocations
  take blocks from the head of the free queue, where the long request's blocks compete with the
  blocks of the short requests that finished.
Reported per server, summed over the rounds: vLLM's preemptions (`/metrics`), and from the
connector's event log the blocks vLLM still cached of each preempted request (what the
connector mirrors) and the prefix hit each preempted request found when it was allocated again (vLLM's own prefix-cache counters leave preempted
requests out). Servers: the connector with `lru` (it only observes: the queue stays in vLLM's
own order, stock vLLM's eviction) and with each policy of `--policies`.
`--label` stores the run under another name (run it with `PYTHONPATH` on an older checkout to
measure older code). Writes docs/results/engine/vllm_preemption.json and the table between the
`vllm-preemption` markers of docs/vllm.md.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

from benchmarks.router_setup import write_between

BURST, PROMPT, OUTPUT, BLOCKS = 6, 600, 400, 96
LONG_PROMPT, LONG_OUTPUT = 1500, 600
STREAM, STREAM_CONCURRENCY, SHORT_PROMPT, SHORT_OUTPUT = 16, 16, 300, 300
SCENARIOS = ("burst", "stream")
OUT = REPO / "docs" / "results" / "engine" / "vllm_preemption.json"
DOCS = REPO / "docs" / "vllm.md"
START, END = "<!-- vllm-preemption:start -->", "<!-- vllm-preemption:end -->"


def metric(base_url: str, name: str) -> float:
    """One of vLLM's Prometheus counters, summed over its labels."""
    from agentrt.enginebench import prom
    return prom.scrape_now(base_url, (name,))[name]


def _body(srv, prompt: list[int], max_tokens: int, xargs: dict, priority: int | None, **more) -> dict:
    """A completion that generates exactly `max_tokens` (`ignore_eos`)."""
    body = {"model": srv.served_name, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True, "vllm_xargs": xargs, **more}
    if priority is not None:
        body["priority"] = priority
    return body


def _post(srv, prompt: list[int], max_tokens: int, xargs: dict, priority: int | None = None) -> None:
    import httpx
    body = _body(srv, prompt, max_tokens, xargs, priority)
    r = httpx.post(srv.base_url + "/v1/completions", json=body, timeout=900)
    r.raise_for_status()
    if r.json()["usage"]["completion_tokens"] != max_tokens:
        raise RuntimeError(f"a request of workflow {xargs.get('agentrt_workflow')} stopped early")


def _tokens(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(16, 4000) for _ in range(n)]


def burst(srv, round_: int) -> None:
    rng = random.Random(round_)
    prompts = [_tokens(rng, PROMPT) for _ in range(BURST)]
    with ThreadPoolExecutor(BURST) as ex:
        list(ex.map(lambda i: _post(srv, prompts[i], OUTPUT, {
            "agentrt_workflow": f"b{round_}-{i}", "agentrt_agent": "worker", "agentrt_end": 1}), range(BURST)))


def _post_streamed(srv, prompt: list[int], max_tokens: int, xargs: dict, priority: int,
                   first_token: threading.Event) -> None:
    """A streamed completion: `first_token` is set once its first token is out (it runs)."""
    import httpx
    body = _body(srv, prompt, max_tokens, xargs, priority, stream=True)
    with httpx.stream("POST", srv.base_url + "/v1/completions", json=body, timeout=900) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if line.startswith("data:") and line.strip() != "data: [DONE]":
                first_token.set()
    first_token.set()


def stream(srv, round_: int) -> None:
    rng = random.Random(1000 + round_)
    long_prompt = _tokens(rng, LONG_PROMPT)
    shorts = [_tokens(rng, SHORT_PROMPT) for _ in range(STREAM)]
    running = threading.Event()
    with ThreadPoolExecutor(1) as ex:
        long_call = ex.submit(_post_streamed, srv, long_prompt, LONG_OUTPUT,
                              {"agentrt_workflow": f"long{round_}", "agentrt_agent": "coder"}, 10, running)
        running.wait(300)                     # it runs before the short ones arrive
        with ThreadPoolExecutor(STREAM_CONCURRENCY) as pool:
            list(pool.map(lambda i: _post(srv, shorts[i], SHORT_OUTPUT, {
                "agentrt_workflow": f"s{round_}-{i}", "agentrt_agent": "helper", "agentrt_end": 1}, 0),
                range(STREAM)))
        long_call.result()


def run_server(policy: str, scenario: str, rounds: int, model: str, tmp: Path) -> dict:
    from agentrt.vllm.config import kv_transfer_config
    from agentrt.local.launch import VLLMServer
    elog = tmp / f"{policy}-{scenario}.jsonl"
    kv = kv_transfer_config(policy, event_log=str(elog))
    srv = VLLMServer(model, num_blocks=BLOCKS, kv_connector=kv,
                     scheduling_policy="priority" if scenario == "stream" else "fcfs",
                     log_path=str(tmp / f"server-{policy}-{scenario}.log")).start()
    run = burst if scenario == "burst" else stream
    try:
        _post(srv, [17] * 64, 2, {"agentrt_workflow": "warm-up", "agentrt_end": 1})   # first-request costs
        p0 = metric(srv.base_url, "vllm:num_preemptions_total")
        t0 = time.perf_counter()
        for r in range(rounds):
            run(srv, r)
        seconds = time.perf_counter() - t0
        pre = metric(srv.base_url, "vllm:num_preemptions_total") - p0
    finally:
        srv.stop()
    from agentrt.vllm.eventlog import read_events
    kept = sum(e.get("blocks", 0) for e in read_events(str(elog), "preempted"))
    resumed = read_events(str(elog), "resumed")
    hits = sum(e.get("local_hit_tokens", 0) for e in resumed)
    return {"preemptions": pre, "resumed": len(resumed), "hit_tokens": hits,
            "blocks_mirrored_at_preemption": kept, "seconds": round(seconds, 1)}


def table(doc: dict) -> str:
    head = (f"`python -m benchmarks.vllm_preemption` (tiny model, {doc['blocks']} blocks of 32 tokens, "
            f"{doc['rounds']} rounds per server and scenario; `burst`: {doc['burst']} requests of "
            f"{doc['prompt']} + {doc['output']} tokens at once, FCFS; `stream`: one low-priority request of "
            f"{doc['long'][0]} + {doc['long'][1]} tokens passed by {doc['stream'][0]} high-priority ones of "
            f"{doc['stream'][2]} + {doc['stream'][3]} tokens, {doc['stream'][1]} at a time, priority "
            "scheduling), from docs/results/engine/vllm_preemption.json. `lru` is vLLM's own "
            "order (the connector only observes). Hit tokens: what preempted requests found "
            "cached when allocated again; the most they could find is what vLLM still cached of "
            "them at the step's end (32 tokens a block): `hit / still cached` is the share kept "
            "of that best case.\n\n"
            "| run | scenario | policy | preemptions | resumed | hit tokens on resuming | per resume | "
            "blocks still cached at preemptions | per preemption | hit / still cached |\n"
            "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
    rows = []
    for label, scenarios in doc["runs"].items():
        for scenario, servers in scenarios.items():
            for name, r in servers.items():
                kept, n, pre = r["blocks_mirrored_at_preemption"], r["resumed"], r["preemptions"]
                per = f"{r['hit_tokens'] / n:.0f}" if n else "-"
                per_pre = f"{kept / pre:.1f}" if pre else "-"
                share = f"{r['hit_tokens'] / (kept * 32):.2f}" if kept else "-"
                rows.append(f"| {label} | {scenario} | {name} | {pre:.0f} | {n} | {r['hit_tokens']:.0f} | "
                            f"{per} | {kept} | {per_pre} | {share} |")
    return head + "\n".join(rows) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.vllm_preemption", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--scenario", choices=[*SCENARIOS, "all"], default="all")
    ap.add_argument("--policies", default="lru,pbkv-lae,pbkv-ta")
    ap.add_argument("--label", default="this checkout")
    ap.add_argument("--log-dir", default=None, help="keep the servers' and the connector's logs here")
    ap.add_argument("--docs-only", action="store_true")
    a = ap.parse_args()
    doc = json.loads(OUT.read_text()) if OUT.exists() else {}
    if not a.docs_only:
        from agentrt.local.model import build_model, default_model_dir
        model = str(build_model(default_model_dir("tiny"), "tiny"))
        doc.update(burst=BURST, prompt=PROMPT, output=OUTPUT, blocks=BLOCKS, rounds=a.rounds,
                   long=[LONG_PROMPT, LONG_OUTPUT],
                   stream=[STREAM, STREAM_CONCURRENCY, SHORT_PROMPT, SHORT_OUTPUT])
        out = doc.setdefault("runs", {}).setdefault(a.label, {})
        scenarios = SCENARIOS if a.scenario == "all" else (a.scenario,)
        with tempfile.TemporaryDirectory() as d:
            if a.log_dir:
                d = a.log_dir
                Path(d).mkdir(parents=True, exist_ok=True)
            servers = [p for p in a.policies.split(",") if p]
            for scenario in scenarios:
                res = out[scenario] = {}
                for policy in servers:
                    name = policy
                    print(f"{a.label}, {scenario}: {name} ...", flush=True)
                    res[name] = run_server(policy, scenario, a.rounds, model, Path(d))
                    print(f"  {res[name]}", flush=True)
        OUT.parent.mkdir(parents=True, exist_ok=True)
        OUT.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {OUT}")
    text = table(doc)
    print(text)
    write_between(DOCS, START, END, text)


if __name__ == "__main__":
    main()

"""The connector's own CPU per scheduler step, per policy, without an engine (a profile to optimise against).

    python -m benchmarks.connector_hooks --trace RUN_DIR/replayed-engine.jsonl --json hooks.json
    python -m benchmarks.connector_hooks --trace ... --policies pbkv-ta --profile 25   # plus cProfile's top

The real `AgentRTConnector` (scheduler role) on vLLM's real `BlockPool`, driven as vLLM's
scheduler drives it by a workflow trace's calls (`replayed-engine.jsonl` from `agentrt bench
--engine vllm`: one hash id per engine block): each call arrives, is looked up and allocated,
then `--steps-per-call` scheduler steps pass (each `build_connector_meta` and
`get_kv_connector_stats`, as vLLM calls them every step), and calls finish oldest first once more
than `--in-flight` are running or the pool needs their blocks. Per policy: the connector's
`hook_s` (all of its scheduler-side hooks, timed as in vLLM) per step and per call, its
re-ranks, and the wall time of the whole replay. Live, at nice 19 on a busy host, a hook's wall
time also counts the time the engine core waits for a CPU (the connector's
`agentrt_connector_hook_seconds_total` is then an upper bound); here nothing else runs, so this
is the hooks' own CPU. Assumptions: vLLM 0.32's BlockPool API; one engine block per hash id;
the decode steps between calls are empty steps (nothing arrives or finishes); a prompt larger
than the pool is looked up and finished at once (`too_long`).
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import io
import json
import pstats
import sys
import time
from pathlib import Path
from types import SimpleNamespace


def requests(path: str) -> tuple[list, int]:
    """vLLM-shaped requests of a trace's calls, and its block size."""
    out, block = [], 16
    for i, line in enumerate(Path(path).read_text().splitlines()):
        d = json.loads(line)
        if "trace" in d:
            block = int(d.get("block_size") or block)
            continue
        hashes = [hashlib.sha256(str(h).encode()).digest() for h in d["hash_ids"]]
        xargs = {"agentrt_workflow": str(d["workflow"]), "agentrt_agent": str(d.get("agent") or "agent")}
        out.append(SimpleNamespace(request_id=f"r{i}", session_id=None, block_hashes=hashes,
                                   num_prompt_tokens=int(d["input_length"]), num_tokens=int(d["input_length"]),
                                   max_tokens=int(d["output_length"]), status="done", kv_transfer_params=None,
                                   sampling_params=SimpleNamespace(extra_args=xargs)))
    return out, block


def connector(policy: str, blocks: int, block_size: int):
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
    from vllm.v1.core.block_pool import BlockPool

    from agentrt.vllm.connector import AgentRTConnector
    kv = SimpleNamespace(kv_connector_extra_config={"policy": policy})
    cfg = SimpleNamespace(kv_transfer_config=kv, cache_config=SimpleNamespace(block_size=block_size),
                          parallel_config=SimpleNamespace(distributed_executor_backend="mp"))
    conn = AgentRTConnector(cfg, KVConnectorRole.SCHEDULER, None)
    pool = BlockPool(num_gpu_blocks=blocks, enable_caching=True, hash_block_size=block_size)
    conn.bind_gpu_block_pool(pool)
    return conn, pool


def replay(policy: str, reqs: list, block_size: int, blocks: int, steps_per_call: int, in_flight: int) -> dict:
    conn, pool = connector(policy, blocks, block_size)
    step = SimpleNamespace(preempted_req_ids=())
    running: list = []
    too_long = 0

    def finish_oldest() -> None:
        r, held = running.pop(0)
        conn.request_finished(r, [b.block_id for b in held])
        pool.free_blocks(reversed(held))
    t0 = time.perf_counter()
    for r in reqs:
        conn.on_new_request(r)
        hit = []
        for h in r.block_hashes:
            got = pool.get_cached_block(h, [0])
            if got is None:
                break
            hit.append(got[0])
        ext, _ = conn.get_num_new_matched_tokens(r, len(hit) * block_size)
        pool.touch(hit)
        need = len(r.block_hashes) - len(hit)
        while running and pool.get_num_free_blocks() < need:
            finish_oldest()
        if pool.get_num_free_blocks() < need:      # a prompt larger than the pool: answered from its hit
            conn.request_finished(r, [b.block_id for b in hit])
            pool.free_blocks(reversed(hit))
            too_long += 1
            continue
        held = hit + pool.get_new_blocks(need)
        ids = [b.block_id for b in held]
        conn.update_state_after_alloc(r, SimpleNamespace(get_block_ids=lambda ids=ids: (ids,)), ext)
        pool.cache_full_blocks(r, held, len(hit), len(r.block_hashes), block_size, 0)
        running.append((r, held))
        for _ in range(steps_per_call):
            conn.build_connector_meta(step)
            conn.get_kv_connector_stats()
        if len(running) > in_flight:
            finish_oldest()
    while running:
        finish_oldest()
    wall = time.perf_counter() - t0
    st = conn.hosted.stats()
    return {"policy": policy, "calls": len(reqs), "steps": st["steps"], "hook_s": st["hook_s"],
            "hook_us_per_step": 1e6 * st["hook_s"] / max(1, st["steps"]),
            "hook_us_per_call": 1e6 * st["hook_s"] / max(1, len(reqs)),
            "reorders": st.get("reorders", 0), "reorder_s": st.get("reorder_s", 0.0), "wall_s": round(wall, 4),
            "too_long": too_long}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.connector_hooks", description=__doc__.split("\n")[0])
    ap.add_argument("--trace", required=True, help="a workflow trace in engine blocks (replayed-engine.jsonl)")
    ap.add_argument("--policies", default="lru,cachesage,pbkv-ta")
    ap.add_argument("--blocks", type=int, default=256, help="the pool, in blocks (vLLM's, null block included)")
    ap.add_argument("--steps-per-call", type=int, default=8, help="scheduler steps between two arrivals")
    ap.add_argument("--in-flight", type=int, default=8, help="calls running at once")
    ap.add_argument("--repeats", type=int, default=3, help="replays per policy (the median's is kept)")
    ap.add_argument("--profile", type=int, default=0, help="print cProfile's top N functions per policy")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    reqs, block = requests(a.trace)
    rows = []
    for policy in a.policies.split(","):
        runs = sorted((replay(policy, reqs, block, a.blocks, a.steps_per_call, a.in_flight) for _ in range(a.repeats)),
                      key=lambda r: r["hook_s"])
        row = runs[len(runs) // 2]
        rows.append(row)
        print(f"{policy:12s} {row['hook_us_per_step']:7.1f} us/step  {row['hook_us_per_call']:8.0f} us/call  "
              f"{row['reorders']} re-ranks ({1e3 * row['reorder_s']:.0f} ms)  replay {row['wall_s']:.2f} s", flush=True)
        if a.profile:
            prof = cProfile.Profile()
            prof.enable()
            replay(policy, reqs, block, a.blocks, a.steps_per_call, a.in_flight)
            prof.disable()
            out = io.StringIO()
            pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(a.profile)
            print(out.getvalue())
    if a.json:
        doc = {"policies": rows, "settings": {"trace": Path(a.trace).name, "block_size": block, "blocks": a.blocks,
                                              "steps_per_call": a.steps_per_call, "in_flight": a.in_flight,
                                              "repeats": a.repeats,
                                              "command": "python -m benchmarks.connector_hooks "
                                                         + " ".join(sys.argv[1:] if argv is None else argv)}}
        Path(a.json).write_text(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

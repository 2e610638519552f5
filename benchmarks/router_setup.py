"""What benchmarks/routers.py and the other router benchmarks share: the replica's settings (the
preset, a quarter of its KV memory, workflows in flight per replica), the generated traces, a
policy factory trained on a separate trace, the unbounded-cache ceiling, a run's row, and the
docs writer."""

from __future__ import annotations

from pathlib import Path

from agentrt.bench.source import workload_source
from agentrt.engine.presets import get_preset
from agentrt.engine.simulator import EngineConfig
from agentrt.policies.registry import make_policy
from agentrt.workloads.base import GenConfig

REPO = Path(__file__).resolve().parents[1]
MOONCAKE = REPO.parent / "shared" / "traces" / "mooncake" / "conversation_trace.jsonl"
PRESET = "llama3.1-8b-h100"
GPU_TOKENS = 6430 * 16
CONC = 16
WORKFLOWS = {"team": 48, "hover": 40, "swebench": 40, "gaia": 32, "mix": 48}
MOONCAKE_PER = 300
MOONCAKE_STRETCH = 4.0     # each replica gets a quarter of the trace's rate (see the docstring)
MOONCAKE_GPU_TOKENS = 25720 * 16


def config(block_size: int, tokens: int = GPU_TOKENS) -> EngineConfig:
    return EngineConfig(get_preset(PRESET), block_size, gpu_blocks=tokens // block_size)


def trained(policy: str, workload: str, n: int, per: int, block_size: int):
    """A factory of `policy` instances sharing one predictor trained on a separate trace (seed 1)."""
    src = workload_source(workload, GenConfig(workflows=per * n, seed=1, concurrency=CONC * n))
    first = make_policy(policy, seed=0)
    first.train(src.eval_calls(), block_size)
    src.close()
    made = [first]

    def factory():
        if made:
            return made.pop()
        p = make_policy(policy, seed=0)
        p.use_predictor(first.predictor)
        return p
    return factory


def trace(name: str, n: int) -> tuple[list, int]:
    """The generated trace of the bounds part for `n` replicas: (calls, block size)."""
    src = workload_source(name, GenConfig(workflows=WORKFLOWS[name] * n, seed=0, concurrency=CONC * n))
    calls = list(src.eval_calls())
    src.close()
    return calls, src.header.block_size


def ceiling(calls, block_size: int) -> float:
    """Token hit rate with one unbounded cache and no timing: each call hits the longest prefix
    of its prompt that any earlier call in the file computed (prompt or output blocks). No
    router over any number of replicas can beat it."""
    seen: set[tuple[str, int]] = set()
    hit = total = 0
    for c in calls:
        n = c.input_length // block_size
        k = 0
        while k < n and (c.tenant, c.hash_ids[k]) in seen:
            k += 1
        hit += min(k * block_size, max(c.input_length - 1, 0))
        total += c.input_length
        seen.update((c.tenant, h) for h in c.hash_ids[:n])
        seen.update((c.tenant, h) for h in c.output_hash_ids)
    return hit / total if total else 0.0


def row(cm) -> dict:
    s = cm.summary()
    keep = ("hit_rate", "ttft_p50_s", "ttft_p99_s", "e2e_p50_s", "e2e_p99_s", "imbalance", "calls",
            "workflows", "router_state", "makespan_s", "replicas", "wall_s")
    return {k: s[k] for k in keep if k in s}


def write_between(path: Path, start: str, end: str, body: str) -> None:
    """Replace what lies between two marker lines of a docs file."""
    text = path.read_text()
    a, b = text.index(start) + len(start), text.index(end)
    path.write_text(text[:a] + "\n" + body + "\n" + text[b:])
    print(f"updated {path}")

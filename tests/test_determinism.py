"""Determinism: a policy's numbers follow from the trace and its options alone.

Not from PYTHONHASHSEED (the iteration order of sets of strings), not from memory addresses (the
iteration order of sets of objects, hashed by id()), and not from what ran before it in the
process (shared caches): every policy of the registry, bounds aside, is replayed in subprocesses
under different hash seeds, together with the others in two orders and alone, and must give
identical summaries.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from agentrt.policies.kvflow import KVFlowPolicy
from agentrt.policies.registry import BOUNDS, policy_names
from agentrt.runtime.state import BlockTag, WorkflowState, tag_block, threads_of
from agentrt.trace.schema import Call

WALL_CLOCK = ("wall_s", "touches_per_s")   # measured, not simulated

# Runs in a subprocess: argv = trace, mode, comma-separated policies; prints {policy: summary}.
# "together": one run_bench over all of them (each runs after the ones before it, one source);
# "alone": one run_bench per policy, each on a fresh source (so it trains its own predictor).
SCRIPT = r"""
import json, sys
from agentrt.bench.runner import BenchOptions, run_bench
from agentrt.bench.source import file_source

trace, mode, names = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
# a small GPU so that eviction decides hits, a host tier so that prefetching policies act, and a
# fixed split so that every run scores the same workflows whichever policies it holds
opts = BenchOptions(gpu_blocks=2000, host_blocks=4000, train_fraction=0.25)
out = {}
for group in ([names] if mode == "together" else [[n] for n in names]):
    source = file_source(trace)
    try:
        out.update(run_bench(source, group, opts)["results"])
    finally:
        source.close()
print(json.dumps(out))
"""


def _policies() -> list[str]:
    return [p for p in policy_names() if p not in BOUNDS]


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> Path:
    from agentrt.trace.writer import write_trace
    from agentrt.workloads.base import GenConfig
    from agentrt.workloads.registry import get_workload
    wl, cfg = get_workload("mix"), GenConfig(workflows=40, seed=0, concurrency=16)
    path = tmp_path_factory.mktemp("det") / "mix.jsonl"
    write_trace(path, wl.header(cfg), wl.generate(cfg))
    return path


def _start(trace: Path, mode: str, names: list[str], hash_seed: int) -> subprocess.Popen:
    env = dict(os.environ, PYTHONHASHSEED=str(hash_seed))
    return subprocess.Popen([sys.executable, "-c", SCRIPT, str(trace), mode, ",".join(names)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _result(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    doc = json.loads(out.strip().splitlines()[-1])
    return {p: {k: v for k, v in r.items() if k not in WALL_CLOCK} for p, r in doc.items()}


def _diff(a: dict, b: dict) -> dict:
    return {k: (a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}


@pytest.mark.slow
def test_every_policy_is_independent_of_hash_seed_and_of_what_ran_before(trace):
    names = _policies()
    assert {"lru", "cachesage", "kvflow"} <= set(names)
    # three processes at once: the work is the same, the machine's cores share it
    procs = {"together, hash seed 0": _start(trace, "together", names, 0),
             "together reversed, hash seed 1": _start(trace, "together", names[::-1], 1),
             "each alone, hash seed 2": _start(trace, "alone", names, 2)}
    runs = {label: _result(p) for label, p in procs.items()}
    ref_label, ref = next(iter(runs.items()))
    assert set(ref) == set(names)
    for label, res in runs.items():
        for p in names:
            assert res[p] == ref[p], f"{p}: {label} differs from {ref_label}: {_diff(ref[p], res[p])}"
    # the replay really exercised eviction, the host tier and prefetching
    assert ref["lru"]["evictions"] > 0 and ref["lru"]["host_hit_rate"] > 0
    assert ref["kvflow"]["prefetch_blocks"] > 0


# ---------------------------------------------------------------- the roots, one by one
class _Block:
    __slots__ = ("meta",)

    def __init__(self) -> None:
        self.meta = None


def test_block_tag_iterates_threads_in_first_use_order_not_by_address():
    wfs = [WorkflowState(f"w{i}", "default", 0.0) for i in range(40)]
    threads = [wf.thread("agent") for wf in wfs]
    order = [threads[i] for i in np.random.default_rng(0).permutation(len(threads))]
    block = _Block()
    for th in order:
        assert tag_block(block, th)
        assert not tag_block(block, th)         # already recorded
    assert isinstance(block.meta, BlockTag)
    # ended workflows are pruned once the tag grows past PRUNE_AT; the rest keep their order
    kept = [th for th in order if not th.workflow.ended]
    assert list(threads_of(block.meta)) == kept == order
    for th in order[::2]:
        th.workflow.ended = True
    extra = WorkflowState("late", "default", 0.0).thread("agent")
    tag_block(block, extra)
    assert list(threads_of(block.meta)) == [th for th in order if not th.workflow.ended] + [extra]


def test_kvflow_step_graph_keeps_successors_in_first_seen_order():
    def call(wf: str, i: int, agent: str, last: bool = False) -> Call:
        return Call(workflow=wf, call=i, input_length=64, output_length=8, hash_ids=[i, 100 + i],
                    agent=agent, last=last)
    calls = [call("a", 0, "plan"), call("a", 1, "zeta"),
             call("b", 0, "plan"), call("b", 1, "beta"),
             call("c", 0, "plan"), call("c", 1, "mu"), call("c", 2, "beta", last=True)]
    p = KVFlowPolicy()
    p.train(calls, 16)
    assert list(p.edges["plan"]) == ["zeta", "beta", "mu"]
    assert list(p.dist["plan"]) == ["zeta", "beta", "mu"]
    assert p.steps("plan", "beta") == 1 and p.steps("mu", "beta") == 1 and p.steps("beta", "plan") > 1

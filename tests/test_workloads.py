"""The workload generators: determinism, valid traces, documented ranges, structure, signals."""

from __future__ import annotations

import json
from collections import defaultdict
from functools import lru_cache

import numpy as np
import pytest

from agentrt.trace.reader import TraceReader
from agentrt.trace.writer import write_trace
from agentrt.workloads.base import GenConfig
from agentrt.workloads.registry import get_workload, workload_names
from agentrt.workloads.stats import compute_stats
from trace_helpers import by_workflow

BENCHMARKS = ["hover", "swebench", "financebench", "mmlu", "mtbench", "gaia", "gsm8k", "humaneval"]
DYNAMIC = [n for n in BENCHMARKS if n != "financebench"]
LONG = ["coding"]   # not in mix; tests/test_workload_coding.py checks its structure and signals
BS = 16


@lru_cache(maxsize=None)
def calls_of(name: str, workflows: int = 150, seed: int = 0, noise: float = 0.3) -> tuple:
    cfg = GenConfig(workflows=workflows, seed=seed, noise=noise)
    return tuple(get_workload(name).generate(cfg))



def test_all_generators_registered():
    names = workload_names()
    for n in BENCHMARKS + LONG + ["mix", "team", "random"]:
        assert n in names


@pytest.mark.parametrize("name", BENCHMARKS + LONG + ["mix", "random"])
def test_deterministic_by_seed(name):
    wl = get_workload(name)
    a = [json.dumps(c.to_json()) for c in wl.generate(GenConfig(workflows=12, seed=7))]
    b = [json.dumps(c.to_json()) for c in wl.generate(GenConfig(workflows=12, seed=7))]
    c = [json.dumps(c.to_json()) for c in wl.generate(GenConfig(workflows=12, seed=8))]
    assert a == b
    assert a != c


@pytest.mark.parametrize("name", BENCHMARKS + LONG + ["mix", "team", "random"])
@pytest.mark.parametrize("arrivals", [{"concurrency": 8}, {"rate": 2.0}])
def test_generated_trace_passes_validator(tmp_path, name, arrivals):
    wl = get_workload(name)
    cfg = GenConfig(workflows=20, seed=3, **arrivals)
    path = tmp_path / f"{name}.jsonl"
    n = write_trace(path, wl.header(cfg), wl.generate(cfg))
    reader = TraceReader(path)
    calls = list(reader)
    assert len(calls) == n
    assert reader.header.block_size == BS
    assert reader.header.concurrency == arrivals.get("concurrency")
    assert sum(1 for c in calls if c.last) == 20
    if name != "team":   # the built-in default predates signals
        assert all(c.signal is not None and len(c.signal) == cfg.signal_dim for c in calls)
    starts = [c.timestamp for c in calls if c.call == 0]
    assert starts == sorted(starts)
    if "rate" in arrivals:
        assert starts[-1] > 0


@pytest.mark.parametrize("name", BENCHMARKS + LONG + ["mix"])
def test_statistics_in_documented_ranges(name):
    wl = get_workload(name)
    st = compute_stats(calls_of(name), BS)
    got = {"calls_per_workflow": st.calls_per_workflow, "prompt_tokens": st.mean_prompt_tokens,
           "output_tokens": st.mean_output_tokens, "reuse_within": st.reuse_within,
           "reuse_across": st.reuse_across}
    assert set(wl.expected) == set(got)
    for key, (lo, hi) in wl.expected.items():
        assert lo <= got[key] <= hi, f"{name} {key} = {got[key]:.3f} outside [{lo}, {hi}]"


def test_financebench_has_one_agent_order_dynamic_ones_many():
    assert compute_stats(calls_of("financebench"), BS).agent_orders == 1
    for name in DYNAMIC:
        assert compute_stats(calls_of(name), BS).agent_orders >= 3, name


def test_swebench_repository_context_is_long():
    coder_first = [wf[[c.agent for c in wf].index("coder")] for wf in by_workflow(calls_of("swebench")).values()]
    sizes = [c.input_length for c in coder_first]
    assert min(sizes) >= 10_000 + get_workload("swebench").system["coder"]
    assert max(sizes) <= 36_000


def test_hover_hops_between_two_and_four():
    for wf in by_workflow(calls_of("hover")).values():
        assert 2 <= sum(1 for c in wf if c.agent == "verifier") <= 4


@pytest.mark.parametrize("name", ["hover", "swebench", "mmlu", "mtbench", "gsm8k", "humaneval", "financebench"])
def test_agent_called_again_extends_its_thread(name):
    """A second call of an agent starts with its first prompt's and output's full blocks."""
    for wf in by_workflow(calls_of(name, 40)).values():
        last: dict[str, list[int]] = {}
        for c in wf:
            if c.agent in last:
                prev = last[c.agent]
                assert c.hash_ids[:len(prev)] == prev, (c.workflow, c.agent, c.call)
            last[c.agent] = c.hash_ids[:c.input_length // BS] + c.output_hash_ids


@pytest.mark.parametrize("name", DYNAMIC + ["mix"])
def test_cross_workflow_sharing_only_through_anchors(name):
    """Blocks seen in another workflow lie inside the calling agent's system prompt."""
    owner: dict[int, str] = {}
    for c in calls_of(name, 60):
        kind, _, agent = c.agent.rpartition("/") if name == "mix" else (name, "", c.agent)
        if kind == "financebench":   # shares filings too (test_financebench_shares_filings...)
            continue
        anchor_blocks = get_workload(kind).system[agent] // BS
        for pos, h in enumerate(c.hash_ids[:c.input_length // BS]):
            if owner.setdefault(h, c.workflow) != c.workflow:
                assert pos < anchor_blocks, (c.workflow, c.agent, pos)
        for h in c.output_hash_ids:
            owner.setdefault(h, c.workflow)


def test_anchors_are_shared_across_workflows():
    firsts = defaultdict(set)
    for c in calls_of("gaia", 40):
        firsts[c.agent].add(c.hash_ids[0])
    assert all(len(v) == 1 for v in firsts.values())


def test_financebench_shares_filings_across_workflows():
    st = compute_stats(calls_of("financebench"), BS)
    anchors_only = sum(get_workload("financebench").system.values()) * 150 / st.prompt_tokens
    assert st.reuse_across > anchors_only * 0.9  # anchors are counted once per call; filings add more


def test_mix_runs_several_types_with_unique_ids():
    calls = calls_of("mix", 80)
    wfs = by_workflow(calls)
    assert len(wfs) == 80
    kinds = {w.rsplit("-", 1)[1] for w in wfs}
    assert len(kinds) >= 6
    for w, cs in wfs.items():
        kind = w.rsplit("-", 1)[1]
        assert all(c.agent.startswith(kind + "/") for c in cs)


def _next_label_accuracy(calls, use_signal: bool, k: int = 25) -> float:
    """Predict each call's next agent (or END) from its agent: the majority label of that agent's
    training calls, or with the signal the majority among its k nearest training calls."""
    wfs = list(by_workflow(calls).values())
    train_ids = {wf[0].workflow for wf in wfs[: len(wfs) // 2]}
    train: dict[str, tuple[list, list]] = defaultdict(lambda: ([], []))
    test = []
    for wf in wfs:
        for i, c in enumerate(wf):
            label = wf[i + 1].agent if i + 1 < len(wf) else "END"
            if c.workflow in train_ids:
                train[c.agent][0].append(c.signal)
                train[c.agent][1].append(label)
            else:
                test.append((c.agent, label, np.array(c.signal)))
    hits = 0
    for agent, label, sig in test:
        sigs, labels = train[agent]
        if use_signal:
            near = np.argsort(np.sum((np.array(sigs) - sig) ** 2, axis=1))[:k]
            labels = [labels[j] for j in near]
        hits += max(set(labels), key=labels.count) == label
    return hits / len(test)


@pytest.mark.parametrize("name", ["hover", "swebench", "gsm8k", "humaneval", "gaia"])
def test_signal_informs_but_does_not_reveal_the_next_step(name):
    path_only = _next_label_accuracy(calls_of(name), use_signal=False)
    with_signal = _next_label_accuracy(calls_of(name), use_signal=True)
    noisy = _next_label_accuracy(calls_of(name, noise=5.0), use_signal=True)
    assert with_signal > path_only + 0.02
    assert with_signal < 0.99
    assert noisy < with_signal


def test_gen_config_refuses_a_negative_seed():
    # numpy's generators take no negative seed: refused here with a message, not deep inside a run
    with pytest.raises(ValueError, match="seed must be >= 0, got -1"):
        GenConfig(seed=-1)
    assert GenConfig(seed=0).seed == 0

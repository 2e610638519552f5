"""The `coding` workload: long main threads, explore subagents, compaction, tool think times."""

from __future__ import annotations

from collections import defaultdict
from functools import lru_cache

import numpy as np
import pytest

from agentrt.trace.reader import TraceReader
from agentrt.trace.writer import write_trace
from agentrt.workloads.base import GenConfig, direction
from agentrt.workloads.coding import COMPACT, EXPLORE, MAIN, RESULT
from agentrt.workloads.registry import get_workload
from agentrt.workloads.stats import compute_stats
from agentrt.workloads.tools import TOOLS

BS = 16
WL = get_workload("coding")
ANCHOR_OF = {MAIN: MAIN, COMPACT: MAIN, EXPLORE: EXPLORE}   # compaction runs on main's thread


@lru_cache(maxsize=None)
def sessions(workflows: int = 60, seed: int = 0, noise: float = 0.3) -> tuple[tuple, ...]:
    by: dict[str, list] = defaultdict(list)
    for c in WL.generate(GenConfig(workflows=workflows, seed=seed, noise=noise)):
        by[c.workflow].append(c)
    return tuple(tuple(v) for v in by.values())


def full(c) -> list[int]:
    """The blocks a later prompt of the same thread starts with: full prompt blocks, then output's."""
    return c.hash_ids[:c.input_length // BS] + c.output_hash_ids


def test_trace_is_valid_through_the_reader(tmp_path):
    cfg = GenConfig(workflows=8, seed=5, rate=0.2)
    path = tmp_path / "coding.jsonl"
    n = write_trace(path, WL.header(cfg), WL.generate(cfg))
    calls = list(TraceReader(path))
    assert len(calls) == n and sum(1 for c in calls if c.last) == 8
    assert {c.agent for c in calls} <= {MAIN, EXPLORE, COMPACT}
    for c in calls:
        assert all(a < c.call for a in c.after)


def test_sizes_short_outputs_huge_prompts():
    st = compute_stats([c for s in sessions() for c in s], BS)
    assert st.mean_prompt_tokens > 20_000 and st.mean_output_tokens < 400
    biggest = [max(c.input_length for c in s) for s in sessions()]
    assert max(biggest) >= 80_000                     # contexts grow towards 1e5 ...
    assert max(biggest) <= 100_000 + 8_000 + 12_000    # ... and compaction keeps them there
    mains = [sum(c.agent == MAIN for c in s) for s in sessions()]
    assert min(mains) >= 8 and sorted(mains)[len(mains) // 2] >= 15


def test_main_thread_grows_by_extension_until_compaction():
    for s in sessions(30):
        prev = None
        for c in s:
            if c.agent == COMPACT:
                assert prev is not None and c.hash_ids[:len(full(prev))] == full(prev)
                prev = None                            # the next main prompt starts a new chain
            elif c.agent == MAIN:
                if prev is not None:
                    assert c.hash_ids[:len(full(prev))] == full(prev), (c.workflow, c.call)
                    assert c.input_length > prev.input_length + prev.output_length
                prev = c


def test_compaction_starts_a_new_chain_after_the_shared_blocks():
    seen = 0
    for s in sessions():
        for i, c in enumerate(s):
            if c.agent != COMPACT:
                continue
            nxt = s[i + 1]
            assert nxt.agent == MAIN and nxt.after == (c.call,)
            before = [x for x in s[:i] if x.agent == MAIN][-1]
            common = 0
            while common < len(nxt.hash_ids) and nxt.hash_ids[common] == before.hash_ids[common]:
                common += 1
            assert WL.system[MAIN] // BS <= common < nxt.input_length // BS    # anchor kept, rest new
            assert nxt.input_length < 30_000 < before.input_length
            # nothing after the restart ever shows the old chain again
            old = set(before.hash_ids[common:])
            assert not any(old & set(x.hash_ids) for x in s[i + 1:] if x.agent == MAIN)
            seen += 1
    assert seen >= 3


def test_subagents_have_their_own_shared_anchor_and_fan_in():
    explore_heads, main_heads = set(), set()
    fan_ins = 0
    for s in sessions():
        main_heads.add(tuple(s[0].hash_ids[:WL.system[MAIN] // BS]))
        for c in s:
            if c.agent == EXPLORE and s[c.after[0]].agent == MAIN:      # a subagent's first call
                explore_heads.add(tuple(c.hash_ids[:WL.system[EXPLORE] // BS]))
                assert c.think_ms == 0 and c.input_length < WL.system[EXPLORE] + 1000
            if c.agent == MAIN and c.after and all(s[a].agent == EXPLORE for a in c.after):
                fan_ins += 1
                assert c.think_ms == 0
                # the main prompt is its history (last prompt and output) plus every summary
                last = [x for x in s[:c.call] if x.agent == MAIN][-1]
                assert c.input_length == (last.input_length + last.output_length
                                          + sum(s[a].output_length for a in c.after))
    assert len(explore_heads) == 1 and len(main_heads) == 1 and explore_heads != main_heads
    assert fan_ins >= 20


def test_parallel_subagents_sometimes():
    widths = []
    for s in sessions():
        spawners = defaultdict(int)
        for c in s:
            if c.agent == EXPLORE and s[c.after[0]].agent == MAIN:
                spawners[c.after[0]] += 1
        widths += spawners.values()
    assert set(widths) == {1, 2, 3}


def test_cross_workflow_sharing_only_through_anchors():
    owner: dict[int, str] = {}
    for s in sessions(30):
        for c in s:
            anchor_blocks = WL.system[ANCHOR_OF[c.agent]] // BS
            for pos, h in enumerate(c.hash_ids[:c.input_length // BS]):
                if owner.setdefault(h, c.workflow) != c.workflow:
                    assert pos < anchor_blocks, (c.workflow, c.agent, pos)
            for h in c.output_hash_ids:
                owner.setdefault(h, c.workflow)


def test_tool_steps_wait_on_their_tools():
    lo = min(TOOLS[t].lo_ms for t in RESULT)
    hi = max(TOOLS[t].hi_ms for t in RESULT)
    thinks = [c.think_ms for s in sessions() for c in s if c.call > 0]
    tool_steps = [t for t in thinks if t > 0]
    assert len(tool_steps) / len(thinks) > 0.8        # nearly every call follows a tool
    assert all(lo <= t <= max(hi, TOOLS["human"].hi_ms) for t in tool_steps)
    assert max(tool_steps) > 60_000                   # test runs and builds take minutes at times


@pytest.mark.parametrize("seed", [1, 2])
def test_generation_is_fast_enough(seed):
    import time
    t = time.process_time()
    list(WL.generate(GenConfig(workflows=50, seed=seed)))
    assert time.process_time() - t < 10.0


def _auc(pos: list[float], neg: list[float]) -> float:
    p, n = np.array(pos)[:, None], np.array(neg)[None, :]
    return float(np.mean(p > n) + 0.5 * np.mean(p == n))


@pytest.mark.parametrize("label, key", [("END", "done"), (COMPACT, "fill")])
def test_signal_tells_the_rare_next_steps_but_noise_hides_them(label, key):
    """Main calls go on to main nine times in ten, so the agent path says little; the signal's
    projection on the decision's direction ranks the calls that end a session or trigger a
    compaction above the others, unless the noise is large."""
    def auc(noise: float) -> float:
        pos, neg = [], []
        d = direction(f"content:{key}", GenConfig().signal_dim)
        for s in sessions(100, 0, noise):
            for i, c in enumerate(s):
                if c.agent == MAIN:
                    nxt = s[i + 1].agent if i + 1 < len(s) else "END"
                    (pos if nxt == label else neg).append(float(np.dot(c.signal, d)))
        return _auc(pos, neg)
    clear, noisy = auc(0.3), auc(5.0)
    assert clear > 0.75 and noisy < clear - 0.15


def _calls(options=None, workflows=12, seed=3):
    return list(get_workload("coding", options).generate(GenConfig(workflows=workflows, seed=seed)))


def test_options_at_their_defaults_generate_the_same_trace():
    defaults = {"system_tokens": 12_000, "compact_min": 80_000, "compact_max": 100_000,
                "turns_scale": 1.0, "max_turns": 90, "explore_sessions": 1.0}
    a, b = _calls(), _calls(defaults)
    assert [(c.workflow, c.call, c.agent, c.hash_ids, c.think_ms) for c in a] == \
           [(c.workflow, c.call, c.agent, c.hash_ids, c.think_ms) for c in b]


def test_the_long_end_options_shape_the_sessions():
    long = {"system_tokens": 14_000, "compact_min": 30_000, "compact_max": 30_000, "turns_scale": 2,
            "max_turns": 200, "explore_sessions": 0.0}
    calls = _calls(long)
    agents = {c.agent for c in calls}
    assert EXPLORE not in agents and COMPACT in agents                 # nobody delegates; all compact
    first = [c for c in calls if c.call == 0]
    assert all(c.input_length >= 14_000 for c in first)
    assert len(calls) > len(_calls())                                   # twice the turns
    wl = get_workload("coding", long)
    assert "explore_sessions=0.0" in wl.header(GenConfig()).description
    assert "options" not in WL.header(GenConfig()).description


@pytest.mark.parametrize("bad", [{"nope": 1}, {"turns_scale": 0}, {"compact_min": 9, "compact_max": 8},
                                 {"explore_sessions": 1.5}])
def test_bad_options_are_one_clear_error(bad):
    from agentrt.errors import AgentrtError
    with pytest.raises(AgentrtError, match="coding"):
        get_workload("coding", bad)

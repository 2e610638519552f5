"""PBKV-TA (time-aware PBKV) and dead-branch untagging, in small exact scenarios."""

import pytest

from agentrt.cache import RadixKVCache
from agentrt.cache.block import GPU, Block
from agentrt.policies.pbkv import PBKVHEPolicy, PBKVTimePolicy
from agentrt.runtime import events as ev
from agentrt.runtime.branches import common_ancestor, untag_dead_branch
from agentrt.runtime.runtime import AgentRuntime
from agentrt.runtime.state import BlockTag, WorkflowState, tag_block, threads_of

from conftest import FixedPredictor as Fixed

BS = 16


def setup(policy, gpu=100):
    rt = AgentRuntime(policy)
    cache = RadixKVCache(gpu, policy=policy, block_bytes=1)
    rt.touch_clock = lambda: cache.touch_clock
    return rt, cache


_rid = [0]


def call(rt, cache, wf, agent, ids, t0, t1, tool=False, expected=None):
    """One call of `agent` in `wf`: arrives at t0, finishes at t1 (tool: its successor waits on a
    tool; expected: the tool's announced duration)."""
    _rid[0] += 1
    info = ev.CallInfo(rid=_rid[0], workflow=wf, agent=agent, tenant="default", index=_rid[0],
                       hash_ids=ids, input_length=len(ids) * BS, output_length=1, block_size=BS)
    rt.observe(ev.CallArrived(t0, info))
    lease = cache.acquire("default", ids, len(ids), 0, t0)
    cache.commit_prompt(lease, t0)
    rt.observe(ev.CallAdmitted(t0, info, lease.node, lease.gpu_hit, lease.host_hit))
    node = lease.node
    rt.observe(ev.CallFinished(t1, info, node, tool, expected))
    cache.release(lease, [], t1)
    return node


def learn_a_60_s_tool(rt, cache) -> None:
    """A finished workflow that teaches the gaps after agent a: 60 s after a tool call, 1 s otherwise."""
    call(rt, cache, "h1", "a", [901], 0.0, 1.0, tool=True)
    call(rt, cache, "h1", "a", [901, 902], 61.0, 62.0)
    call(rt, cache, "h1", "a", [901, 902, 903], 63.0, 64.0)
    rt.observe(ev.WorkflowEnded(64.0, "h1", "default"))


def test_a_workflow_waiting_on_a_long_tool_goes_before_one_due_soon():
    """Both threads are equally likely next; one waits on a 60 s tool, the other on nothing.
    PBKV-HE ranks them alike (steps, not time) and falls back to recency; PBKV-TA evicts the
    long wait first even though its blocks were touched more recently."""
    orders = {}
    for cls in (PBKVHEPolicy, PBKVTimePolicy):
        p = cls(predictor=Fixed(["a"], [0.9]))
        rt, cache = setup(p)
        learn_a_60_s_tool(rt, cache)
        call(rt, cache, "soon", "a", [1, 2], 100.0, 101.0, tool=False)
        call(rt, cache, "late", "a", [3, 4], 100.5, 101.5, tool=True)
        orders[cls.name] = [b.hash for b in cache.peek_victims(3)]
    assert orders["pbkv-he"][1:] == [2, 4]          # retired 903 first, then by recency
    assert orders["pbkv-ta"][1:] == [4, 2]          # the 60 s wait goes first


def test_announced_tool_times_decide_between_two_tool_waits():
    """Both workflows wait on a tool after the same agent, learned to take 60 s. Without
    announcements the one that started waiting first is due first (its residual is shorter), so
    the other goes first; announced as 300 s and 2 s, the 300 s wait goes first."""
    orders = {}
    for hints in (False, True):
        p = PBKVTimePolicy(predictor=Fixed(["a"], [0.9]))
        rt, cache = setup(p)
        learn_a_60_s_tool(rt, cache)
        call(rt, cache, "long", "a", [1, 2], 100.0, 101.0, tool=True, expected=300.0 if hints else None)
        call(rt, cache, "short", "a", [3, 4], 100.5, 101.5, tool=True, expected=2.0 if hints else None)
        orders[hints] = [b.hash for b in cache.peek_victims(3)]
    assert orders[False][1:] == [4, 2]
    assert orders[True][1:] == [2, 4]


def test_an_announced_tool_time_holds_until_it_is_overdue():
    from types import SimpleNamespace
    from agentrt.policies.pbkv.timing import AgentTimes
    t = AgentTimes()
    info = SimpleNamespace(rid=1, workflow="w", agent="a", tenant="default", key=("default", "w"))
    t.arrived(0.0, info)
    t.finished(1.0, info, True, 5.0)
    wf = SimpleNamespace(id="w", key=("default", "w"), running=False, tenant="default", path=["a"],
                         last_seen=0.0)
    assert t.next_start(wf, 2.0, 0.0, 10.0) == pytest.approx(6.0)    # announced: back at 1 + 5
    # overdue: the learned gaps (none yet: the default 10 s) given the 7 s waited
    assert t.next_start(wf, 8.0, 0.0, 10.0) == pytest.approx(8.0 + 10.0)
    t.finished(1.0, info, True, None)                                   # nothing announced
    assert t.next_start(wf, 2.0, 0.0, 10.0) == pytest.approx(12.0)
    # two waits announced as 4 s and 6 s took 8 s and 12 s: an exact framework, twice optimistic,
    # so a wait announced as 3 s is read as 6 s
    t.finished(1.0, info, True, 4.0)
    t.arrived(9.0, info)
    t.finished(10.0, info, True, 6.0)
    t.arrived(22.0, info)
    t.finished(23.0, info, True, 3.0)
    assert t.next_start(wf, 24.0, 0.0, 10.0) == pytest.approx(23.0 + 6.0)


def test_time_aware_values_follow_expected_time_to_next_use():
    p = PBKVTimePolicy(predictor=Fixed(["a", "b"], [0.5, 0.3]))
    rt, cache = setup(p)
    call(rt, cache, "w", "a", [1], 0.0, 1.0)
    call(rt, cache, "w", "b", [2], 2.0, 3.0)
    p._refresh()
    ta, tb = rt.workflows[("default", "w")].threads["a"].value, rt.workflows[("default", "w")].threads["b"].value
    assert ta > tb > 0.0


def test_dead_branch_of_a_live_thread_is_retired():
    """The thread's second prompt drops blocks 2, 3 of its first (its history was rewritten)."""
    p = PBKVTimePolicy()
    rt, cache = setup(p)
    call(rt, cache, "w", "a", [1, 2, 3], 0.0, 1.0)
    call(rt, cache, "other", "b", [7], 1.5, 2.0)
    call(rt, cache, "w", "a", [1, 4], 3.0, 4.0)
    victims = [b.hash for b in cache.peek_victims(3)]
    assert victims[0] == 3 and 3 in victims and 4 not in victims[:1]
    assert all(not th.workflow.ended for b in (cache.roots["default"].children[1],)
               for th in threads_of(b.meta))
    block3 = cache.roots["default"].children[1].children[2].children[3]
    assert block3.meta is None                       # untagged: nobody will read it


def test_published_pbkv_keeps_dead_branches_tagged():
    p = PBKVHEPolicy()
    rt, cache = setup(p)
    call(rt, cache, "w", "a", [1, 2, 3], 0.0, 1.0)
    call(rt, cache, "w", "a", [1, 4], 3.0, 4.0)
    assert cache.roots["default"].children[1].children[2].children[3].meta is not None


def test_anchor_of_an_agent_without_live_threads_is_not_retired():
    p = PBKVTimePolicy()
    rt, cache = setup(p)
    for i, wf in enumerate(["w1", "w2", "w3"]):
        call(rt, cache, wf, "a", [1, 2, 100 + i], 10.0 * i, 10.0 * i + 1)
        call(rt, cache, wf, "b", [5, 200 + i], 10.0 * i + 2, 10.0 * i + 3)
        rt.observe(ev.WorkflowEnded(10.0 * i + 3, wf, "default"))
    block1 = cache.roots["default"].children[1]
    assert p.anchor_density("default", 1) == pytest.approx(1 / 10.0)
    assert p.score(block1)[0] == 1                   # kept as live cache: the next thread reads it
    assert p.score(block1.children[2].children[102])[0] == 0


def test_one_call_workflows_get_no_anchors():
    """Without workflow identity (every call its own workflow, as Mooncake's), a workflow's end
    does not mean its blocks are dead: anchors must not rank above them."""
    p = PBKVTimePolicy()
    rt, cache = setup(p)
    for i, wf in enumerate(["w1", "w2", "w3"]):
        call(rt, cache, wf, "a", [1, 2, 100 + i], 10.0 * i, 10.0 * i + 1)
        rt.observe(ev.WorkflowEnded(10.0 * i + 1, wf, "default"))
    block1 = cache.roots["default"].children[1]
    assert p.anchor_density("default", 1) is None
    assert p.score(block1)[0] == 0 and p.score(block1.children[2].children[102])[0] == 0
    call(rt, cache, "w4", "a", [1, 2, 103], 40.0, 41.0)   # a workflow that goes on: anchors count
    call(rt, cache, "w4", "a", [1, 2, 103, 104], 42.0, 43.0)
    assert p.anchor_density("default", 1) is not None and p.score(block1)[0] == 1


def _chain(root, hashes):
    node, out = root, []
    for h in hashes:
        child = node.children.get(h) or Block(h, node, GPU, "t")
        node.children[h] = child
        out.append(child)
        node = child
    return out


def test_untag_dead_branch_stops_at_the_common_ancestor_and_keeps_other_threads():
    root = Block(-1, None, GPU, "t")
    old = _chain(root, [1, 2, 3])
    new = _chain(root, [1, 4])
    wf = WorkflowState("w", "t", 0.0)
    th, other = wf.thread("a"), wf.thread("b")
    for b in old + new:
        tag_block(b, th)
    tag_block(old[1], other)
    assert common_ancestor(old[-1], new[-1]) is old[0]
    assert untag_dead_branch(old[-1], new[-1], th) == 2
    assert old[2].meta is None
    assert type(old[1].meta) is BlockTag and list(old[1].meta.threads) == [other]
    assert old[0].meta is th and new[1].meta is th


# ------------------------------------------------------------------ tail survival
def test_dropped_counts_the_end_of_the_path_a_prompt_does_not_share():
    from agentrt.policies.pbkv.timing import dropped
    root = Block(-1, None, GPU, "default")
    leaf = _chain(root, [1, 2, 3, 4])[-1]
    assert leaf.depth == 4 and leaf.parent.depth == 3 and root.depth == 0
    assert dropped(leaf, [1, 2, 3, 4, 5]) == 0          # the next prompt extends the path
    assert dropped(leaf, [1, 2, 9]) == 2                 # it rewrote the last two blocks
    assert dropped(leaf, [8]) == 4


def test_tail_kept_is_the_share_of_drops_no_longer_than_the_distance():
    from agentrt.policies.pbkv.timing import Tail
    t = Tail(keep=4)
    for n in (0, 2, 2, 5):
        t.add(n)
    assert t.kept(0) == 0.25 and t.kept(1) == 0.25 and t.kept(2) == 0.75 and t.kept(5) == 1.0
    assert t.kept(-1) == 1.0
    t.add(9)                                               # the oldest (0) leaves the window
    assert t.kept(0) == 0.0 and t.kept(8) == 0.75


def test_with_tails_a_rewritten_tail_goes_before_a_thread_that_only_appends():
    """Agents a and c are equally likely next and equally timed; a's next prompt always rewrites
    the last two blocks of its previous path (a ledger), c's only appends. Without tails the two
    live threads tie and recency decides: c's older leaf goes first. With tails a's two tail
    blocks, which its next call will not read, go first."""
    first = {}
    for tails in (False, True):
        p = PBKVTimePolicy(predictor=Fixed(["a", "c"], [0.45, 0.45]), tails=tails)
        rt, cache = setup(p)
        for wf, agent, base in (("ha", "a", 500), ("hc", "c", 600)):
            prev = [base]
            for k in range(3):           # a: keep [base], rewrite two; c: append two
                new = [base + 10 * k + 1, base + 10 * k + 2]
                ids = [base] + new if agent == "a" else prev + new
                call(rt, cache, wf, agent, ids, 2.0 * k, 2.0 * k + 1.0)
                prev = ids
            rt.observe(ev.WorkflowEnded(6.0, wf, "default"))
        call(rt, cache, "wc", "c", [21, 22, 23, 24], 10.0, 11.0)
        call(rt, cache, "wa", "a", [1, 2, 3, 4], 10.0, 11.0)
        p._refresh()
        live = [b.hash for b in cache.peek_victims(cache.gpu_used) if b.hash in (4, 24)]
        first[tails] = live[0]
    assert first == {False: 24, True: 4}

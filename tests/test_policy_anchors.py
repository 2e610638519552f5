"""`policies/pbkv/anchors.py`: agents' anchor blocks and the rate their new threads read them."""

from types import SimpleNamespace

from agentrt.policies.pbkv.anchors import AgentAnchors


def prof(anchor, workflows):
    return SimpleNamespace(anchor=list(anchor), anchor_workflows=workflows)


def test_an_anchor_counts_once_two_workflows_confirm_it_and_is_read_at_the_thread_start_rate():
    a = AgentAnchors()
    a.update(("t", "coder"), prof([1, 2, 3], 1))
    assert not a and a.density("t", 1) is None           # one workflow: not an anchor yet
    a.update(("t", "coder"), prof([1, 2, 3], 2))
    assert a and a.blocks() == 3
    assert a.density("t", 1) == 0.0                      # no thread-start gap seen yet
    for now in (0.0, 10.0, 30.0):                         # gaps 10 and 20 s: 1 / 15 s
        a.thread_started(("t", "coder"), now)
    assert abs(a.density("t", 2) - 1 / 15) < 1e-12
    assert a.density("t", 4) is None and a.density("u", 1) is None   # another block, another tenant


def test_a_block_anchoring_two_agents_takes_the_faster_and_shrinking_anchors_release_blocks():
    a = AgentAnchors()
    a.update(("t", "x"), prof([1, 2], 2))
    a.update(("t", "y"), prof([1, 5], 2))
    for now in (0.0, 4.0):
        a.thread_started(("t", "x"), now)
    for now in (0.0, 40.0):
        a.thread_started(("t", "y"), now)
    assert a.density("t", 1) == 1 / 4
    assert a.density("t", 5) == 1 / 40
    a.update(("t", "x"), prof([1], 2))                    # x's anchor shrinks to one block
    assert a.density("t", 2) is None and a.density("t", 1) == 1 / 4
    a.update(("t", "x"), prof([], 2))
    a.update(("t", "y"), prof([], 2))
    assert not a and a.table == {} and ("t", "x") not in a.of


def test_tables_stay_bounded_per_tenant(monkeypatch):
    from agentrt.policies.pbkv import anchors
    monkeypatch.setattr(anchors, "MAX_AGENT_KEYS", 8)
    a = anchors.AgentAnchors()
    a.update(("quiet", "q"), prof([7], 2))
    for i in range(100):                                   # a client inventing agents
        a.update(("loud", f"a{i}"), prof([1000 + i], 2))
        a.thread_started(("loud", f"a{i}"), float(i))
    assert len(a.of) <= 8 and len(a.starts) <= 8
    assert ("quiet", "q") in a.of and a.density("quiet", 7) is not None
    held = {agent for table in a.table.values() for agents in table.values() for agent in agents}
    assert held <= {agent for _, agent in a.of}

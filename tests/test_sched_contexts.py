"""LiveContexts: the union of live workflows' context paths, kept incrementally, equals a recount."""

from hypothesis import given, settings
from hypothesis import strategies as st

from agentrt.cache.block import GPU, Block
from agentrt.sched.contexts import LiveContexts


def make_tree(shape: list[int]) -> list[Block]:
    """A tenant root and blocks whose parents are drawn from earlier blocks (shape[i] picks one)."""
    root = Block(-1, None, GPU, "t")
    nodes = [root]
    for i, pick in enumerate(shape):
        parent = nodes[pick % len(nodes)]
        b = Block(i, parent, GPU, "t")
        parent.children[i] = b
        nodes.append(b)
    return nodes


def union_size(nodes: dict) -> int:
    seen = set()
    for b in nodes.values():
        while b is not None and b.parent is not None:
            seen.add(id(b))
            b = b.parent
    return len(seen)


@settings(max_examples=200, deadline=None)
@given(shape=st.lists(st.integers(0, 10**6), min_size=1, max_size=40),
       ops=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 10**6), st.booleans()), max_size=60))
def test_union_matches_recount(shape, ops):
    nodes = make_tree(shape)
    live = LiveContexts()
    truth: dict = {}
    for wf, pick, drop in ops:
        if drop:
            live.drop(wf)
            truth.pop(wf, None)
        else:
            node = nodes[1 + pick % (len(nodes) - 1)]
            live.set(wf, node)
            truth[wf] = node
        assert len(live) == union_size(truth)
        assert live.workflows == len(truth)
        for k, node in truth.items():
            assert live.blocks_of(k) == union_size({k: node})
    for wf in list(truth):
        live.drop(wf)
    assert len(live) == 0


def test_extending_a_context_only_counts_new_blocks_once():
    nodes = make_tree([0, 1, 2, 3])          # a chain of four blocks
    live = LiveContexts()
    live.set("a", nodes[2])
    live.set("b", nodes[2])                  # the same prefix: counted once
    assert len(live) == 2
    live.set("a", nodes[4])
    assert len(live) == 4
    assert live.blocks_of("a") == 4 and live.blocks_of("b") == 2
    live.drop("a")
    assert len(live) == 2
    assert "b" in live and "a" not in live and live.blocks_of("a") == 0


def test_roots_are_never_counted():
    root = make_tree([])[0]
    live = LiveContexts()
    live.set("a", root)
    assert len(live) == 0 and live.workflows == 0

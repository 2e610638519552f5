"""The example package's own test: run it with the package installed (`pip install -e .`)."""

from agentrt.policies.registry import make_policy, policy_names
from agentrt_policy_example import PrefixKeepPolicy


def test_agentrt_finds_the_policy_by_its_entry_point():
    assert "prefix-keep" in policy_names()
    pol = make_policy("prefix-keep", keep=2, seed=0)
    assert isinstance(pol, PrefixKeepPolicy) and pol.keep == 2


def test_leading_blocks_go_last():
    from agentrt.cache.block import GPU, Block

    root = Block(0, None, GPU, "default")
    shallow = Block(1, root, GPU, "default")
    deep = Block(2, Block(3, shallow, GPU, "default"), GPU, "default")
    shallow.last_touch, deep.last_touch = 1, 5      # the shallow block is older, and still kept
    pol = PrefixKeepPolicy(keep=1)
    assert pol.score(deep) < pol.score(shallow)

"""TenantLRU (runtime/tenant_lru.py): a bounded map shared by tenants in which the tenant holding
the most entries gives up its least recently used one. Properties against a reference model."""

from __future__ import annotations

from collections import OrderedDict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrt.runtime.tenant_lru import TenantLRU


def test_drops_the_largest_tenants_least_recently_used_entry():
    dropped = []
    m = TenantLRU(4, on_drop=lambda t, k, v: dropped.append((t, k, v)))
    m.set(("b", 1), "b1")
    for i in range(3):
        m.set(("a", i), f"a{i}")
    m.touch(("a", 0))
    m.set(("a", 3), "a3")                    # 5 > 4: a holds the most; its LRU is 1
    assert dropped == [("a", 1, "a1")] and ("b", 1) in m and len(m) == 4
    m.set(("b", 2), "b2")                    # a still holds 3 of 5: its LRU (2) goes
    assert dropped[-1] == ("a", 2, "a2") and m.tenant_size("b") == 2
    assert m.dropped == 2


def test_reads_like_a_dict():
    m = TenantLRU(10)
    m[("t", "x")] = 1
    m.set(("t", "x"), 2)                     # replace: no growth
    assert m[("t", "x")] == 2 and m.get(("t", "y"), 7) == 7 and len(m) == 1
    assert list(m) == [("t", "x")] and list(m.items()) == [(("t", "x"), 2)] and list(m.values()) == [2]
    assert m.pop(("t", "x")) == 2 and m.pop(("t", "x"), None) is None and len(m) == 0
    assert m.tenant_size("t") == 0
    with pytest.raises(ValueError):
        TenantLRU(0)


ops = st.lists(st.tuples(st.sampled_from(["set", "many", "touch", "pop"]), st.sampled_from("abcd"),
                         st.integers(0, 12)), max_size=300)


@settings(max_examples=200, deadline=None)
@given(cap=st.integers(1, 12), seq=ops)
def test_matches_the_reference_model(cap, seq):
    m = TenantLRU(cap)
    ref: dict[str, OrderedDict] = {}
    reached: dict[str, int] = {}        # tenant -> when it reached its count (a change counter)
    clock = iter(range(10**9))
    for i, (op, t, k) in enumerate(seq):
        o = ref.setdefault(t, OrderedDict())
        if op in ("set", "many"):
            keys = [k] if op == "set" else [k, k + 1, k + 2, k]      # a batch, one key twice
            grew = False
            for x in keys:
                if x in o:
                    o.move_to_end(x)
                else:
                    o[x] = None
                    grew = True
            if grew:
                reached[t] = next(clock)
            if op == "set":
                m.set((t, k), (t, k, i))
            else:
                m.set_many(t, keys, i)
            while sum(len(x) for x in ref.values()) > cap:
                top = max(len(x) for x in ref.values())
                # ties: the tenant that reached the top count first
                victim = min((t2 for t2, x in ref.items() if len(x) == top), key=lambda t2: reached[t2])
                ref[victim].popitem(last=False)
                reached[victim] = next(clock)
        elif op == "touch":
            if k in o:
                o.move_to_end(k)
            m.touch((t, k))
        else:
            if k in o:
                del o[k]
                reached[t] = next(clock)
            m.pop((t, k))
        assert len(m) <= cap
        assert {key for key in m} == {(t2, k2) for t2, x in ref.items() for k2 in x}


@settings(max_examples=200, deadline=None)
@given(cap=st.integers(4, 40), share=st.integers(1, 10), flood=st.integers(0, 200))
def test_a_tenant_within_its_share_loses_nothing_to_anothers_flood(cap, share, flood):
    """Two tenants: B holds at most half the capacity; A inserts any number of new keys."""
    share = min(share, cap // 2)
    m = TenantLRU(cap)
    for k in range(share):
        m.set(("b", k), k)
    for k in range(flood):
        m.set(("a", k), k)
        assert m.tenant_size("b") == share

"""Inferred conversation turns and the follow-up hazard (policies/pbkv/turns.py), used by PBKV-TA for
tenants whose requests carry no workflow identity."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentrt import api
from agentrt.policies.pbkv import turns
from agentrt.policies.pbkv.turns import TurnHazard

REPO = Path(__file__).resolve().parents[1]
SYNTHETIC = REPO.parent / "shared" / "traces" / "mooncake" / "synthetic_trace.jsonl"


def test_a_turn_follows_the_request_whose_prompt_but_its_partial_last_block_it_extends():
    th = TurnHazard()
    th.arrived("t", [0, 1, 2, 3], 0.0)          # turn 1 (its last block 3 is partial)
    th.arrived("t", [0, 9], 1.0)                # shares only the first block: another turn 1
    th.arrived("t", [0, 1, 2, 4, 5], 10.0)      # extends the first: turn 2, followed at 10 s
    t = th._tenants["t"]
    assert t.events[0].sum() == 1 and t.events[1].sum() == 0
    assert t.events[0, turns._bin(10.0)] == 1
    th.arrived("t", [0, 1, 2, 4, 5, 6], 20.0)   # turn 3
    assert t.events[1].sum() == 1
    rec, pos = th._blocks[("t", 6)][:2]
    assert (rec[0], rec[1], pos) == (3, 20.0, 5)
    # each request is followed up once: a second branch from the first turn adds no event
    th.arrived("t", [0, 1, 2, 7], 30.0)
    assert t.events.sum() == 2


def test_later_turns_that_are_followed_more_often_rank_denser_and_tenants_stay_apart():
    th = TurnHazard()
    now, base = 0.0, 1000
    for i in range(200):
        # every conversation has 3 turns 30 s apart; after its third it ends
        ids = [base + 10 * i + k for k in range(2)]
        for turn in range(3):
            th.arrived("a", ids, now)
            now += 30.0
            ids = ids + [base + 10 * i + 2 + turn]
        th.arrived("b", [5_000_000 + 2 * i, 5_000_001 + 2 * i], now)    # b: one-turn requests
    th.advance(now + 100_000.0)
    # a first turn is always followed up 30 s later, a third never: at any age below 30 s a
    # block last read by a first turn is denser than one last read by a third
    last = 1000 + 10 * 199 + 3                           # read by the last conversation's third turn
    assert th.density("a", last, now) is not None
    table = th._tenants["a"].table
    for age in (1.0, 10.0):
        b = turns._bin(age)
        assert table[0, b] > 10 * table[2, b] and table[1, b] > 10 * table[2, b]
    # tenant b's tables learn nothing of a's conversations: its requests were never followed,
    # so recency alone orders its blocks
    assert th._tenants["b"].events.sum() == 0
    assert th.density("b", 5_000_000 + 2 * 199, now) is None
    assert th.density("c", 1000, now) is None            # a tenant never seen
    assert th.density("a", 999_999_999, now) is None     # a block no prompt named


def test_one_tenants_prompts_never_drop_another_tenants_turns(monkeypatch):
    monkeypatch.setattr(turns, "MAX_BLOCKS", 64)
    th = TurnHazard()
    th.arrived("quiet", [1, 2, 3], 0.0)
    for i in range(500):
        th.arrived("loud", [10_000 + 4 * i + k for k in range(4)], float(i))
    th.arrived("quiet", [1, 2, 3, 4], 600.0)                # still found as the next turn
    assert th._tenants["quiet"].events.sum() == 1


def test_tables_stay_bounded(monkeypatch):
    monkeypatch.setattr(turns, "MAX_OPEN", 50)
    monkeypatch.setattr(turns, "MAX_BLOCKS", 300)
    th = TurnHazard()
    for i in range(2000):
        th.arrived(f"t{i % 7}", [i * 3, i * 3 + 1, i * 3 + 2], float(i))
    for i in range(500):                  # conversations whose first turn is followed at once
        base = 10**6 + 10 * i
        th.arrived("c", [base, base + 1, base + 2], 2000.0 + i)
        th.arrived("c", [base, base + 1, base + 2, base + 3], 2000.0 + i)
    assert th._n_open <= 50 and len(th._blocks) <= 300
    assert len(th._open) <= 100 and len(th._crossings) <= 100      # closed records compacted away
    # the block map is shared max-min by tenant: no tenant holds much more than its share
    assert max(th._blocks.tenant_size(f"t{i}") for i in range(7)) <= 300 // 7 + 1
    assert th.state_bytes() > 0


def test_no_follow_ups_leave_the_order_to_recency():
    """Independent requests (nothing re-sent): no density is given, so PBKV-TA's key falls
    through to recency, as LRU."""
    th = TurnHazard()
    for i in range(300):
        th.arrived("t", [10 * i, 10 * i + 1], float(i))
    th.advance(400.0)
    assert {th.density("t", 10 * i, 400.0) for i in range(0, 300, 7)} == {None}


@pytest.mark.slow
@pytest.mark.skipif(not SYNTHETIC.exists(), reason=f"{SYNTHETIC} not found (../shared/traces is absent)")
def test_on_mooncake_synthetic_trace_turns_stay_within_half_a_point_of_lru_and_default_ties_it():
    for scale in (8.0,):        # the trace's gaps shrunk 8x: the most eviction pressure
        with pytest.warns(Warning):     # the trace names no agents
            r = api.simulate(str(SYNTHETIC), ["lru", "pbkv-ta"], time_scale=scale)
            on = api.simulate(str(SYNTHETIC), ["pbkv-ta"], time_scale=scale,
                              policy_options={"pbkv-ta": {"turns": True}})
        hits = {rec["policy"]: rec["hit_rate"] for rec in r.records()}
        assert hits["pbkv-ta"] == hits["lru"], (scale, hits)           # turns off: LRU's order
        assert on.records()[0]["hit_rate"] >= hits["lru"] - 0.005, (scale, hits)

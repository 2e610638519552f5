"""The `random` workload: one application per seed, drawn across the space, valid and well formed."""

from __future__ import annotations

from agentrt.workloads.base import GenConfig
from agentrt.workloads.randomapp import MAX_STEPS, draw_app
from agentrt.workloads.registry import get_workload
from trace_helpers import by_workflow

BS = 16


def calls(seed: int, workflows: int = 30) -> list:
    return list(get_workload("random").generate(GenConfig(workflows=workflows, seed=seed)))



def test_seeds_draw_different_applications_across_the_space():
    apps = [draw_app(s) for s in range(1, 41)]
    assert len({len(a.agents) for a in apps}) >= 4
    assert {a.broadcast for a in apps} == {True, False}
    assert any(a.delegator >= 0 for a in apps) and any(a.delegator < 0 for a in apps)
    assert len({a.describe() for a in apps}) >= 30
    for a in apps:
        assert 2 <= len(a.agents) <= 7
        for row in a.transitions:
            assert abs(sum(row) - 1.0) < 1e-9 and min(row) >= 0.0
        if a.delegator >= 0:
            assert a.delegator != a.worker


def test_the_application_does_not_depend_on_the_workflow_count():
    assert draw_app(5) is draw_app(5)
    few, many = calls(5, 10), calls(5, 30)
    assert [c.to_json() for c in few] == [c.to_json() for c in many[:len(few)]]


def test_header_describes_the_application():
    h = get_workload("random").header(GenConfig(workflows=1, seed=3))
    assert draw_app(3).describe() in h.description


def test_workflows_are_bounded_and_well_formed():
    for seed in (1, 2, 3, 4, 6):
        app = draw_app(seed)
        names = {a.name for a in app.agents}
        for wf in by_workflow(calls(seed)).values():
            assert sum(c.last for c in wf) == 1 and wf[-1].last
            assert wf[0].agent == app.agents[app.first].name
            assert all(c.agent in names for c in wf)
            main = [c for c in wf if not (app.delegator >= 0 and c.agent == app.agents[app.worker].name
                                          and c.after and wf[c.after[0]].agent == app.agents[app.delegator].name)]
            assert len(main) <= MAX_STEPS
            for c in wf[1:]:
                assert c.after and all(a < c.call for a in c.after)


def test_an_agent_called_again_extends_its_thread_or_restarts_from_its_anchor():
    for seed in (1, 2, 3, 5, 6):
        app = draw_app(seed)
        anchor_blocks = {a.name: a.system // BS for a in app.agents}
        for wf in by_workflow(calls(seed)).values():
            last: dict[str, list[int]] = {}
            first_block: dict[str, int] = {}
            for c in wf:
                full = c.hash_ids[:c.input_length // BS]
                first_block.setdefault(c.agent, c.hash_ids[0])
                assert c.hash_ids[0] == first_block[c.agent]      # every prompt starts at the anchor
                prev = last.get(c.agent)
                if prev is not None and c.hash_ids[:len(prev)] != prev:
                    # compaction, or a parallel instance forked from the agent's history: either
                    # way the prompt shares the agent's anchor blocks
                    assert c.hash_ids[:anchor_blocks[c.agent]] == prev[:anchor_blocks[c.agent]]
                last[c.agent] = full + c.output_hash_ids


def test_fan_out_runs_parallel_instances_after_the_delegator():
    seed = next(s for s in range(1, 60) if draw_app(s).delegator >= 0)
    app = draw_app(seed)
    dele, worker = app.agents[app.delegator].name, app.agents[app.worker].name
    seen = 0
    for wf in by_workflow(calls(seed)).values():
        for c in wf:
            if c.agent == dele and not c.last:
                subs = [d for d in wf if d.after == (c.call,) and d.agent == worker]
                if subs:
                    assert 2 <= len(subs) <= 4
                    nxt = [d for d in wf if subs[-1].call in d.after]
                    assert len(nxt) == 1 and nxt[0].after == tuple(d.call for d in subs)
                    seen += 1
    assert seen > 0


def test_cross_workflow_sharing_only_through_anchors():
    for seed in (1, 4):
        app = draw_app(seed)
        anchor_blocks = {a.name: a.system // BS for a in app.agents}
        owner: dict[int, str] = {}
        for c in calls(seed, 20):
            for pos, h in enumerate(c.hash_ids[:c.input_length // BS]):
                if owner.setdefault(h, c.workflow) != c.workflow:
                    assert pos < anchor_blocks[c.agent], (c.workflow, c.agent, pos)
            for h in c.output_hash_ids:
                owner.setdefault(h, c.workflow)

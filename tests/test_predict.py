"""Workflow predictors: samples and dataset expansion, Markov exactness, the call graph, the
GraphSAGE / R-GCN models (accuracy against Markov, save/load, determinism, robustness), the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest

from agentrt.errors import AgentrtError
from agentrt.predict.base import END, PathState, WorkflowSample
from agentrt.predict.graph import FORWARD, REVERSE, SELF, build_graph
from agentrt.predict.io import fit_and_evaluate, load_predictor, make_predictor, train_predictor
from agentrt.predict.markov import MarkovPredictor
from agentrt.predict.samples import (PROB_FLOOR, evaluate, expand, samples_from_calls,
                                     samples_from_workload, split_samples)
from agentrt.trace.schema import Call

torch = pytest.importorskip("torch")
pytest.importorskip("torch_geometric")

FAST = {"epochs": 25, "patience": 5}


def wf(name: str, agents: str, signals=None) -> WorkflowSample:
    a = agents.split()
    return WorkflowSample(name, a, signals if signals is not None else [None] * len(a))


def signal_samples(n: int, seed: int = 0) -> list[WorkflowSample]:
    """router -> left | right by the sign of the router call's signal, then writer, then END."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        s = 1.0 if rng.random() < 0.5 else -1.0
        sig = (np.array([s, 0.3, -0.2, 0.0]) + rng.normal(0, 0.2, 4)).tolist()
        branch = "left" if s > 0 else "right"
        out.append(WorkflowSample(f"w{i}", ["router", branch, "writer"],
                                  [sig, rng.normal(0, 0.2, 4).tolist(), rng.normal(0, 0.2, 4).tolist()]))
    return out


@pytest.fixture(scope="module")
def sig_data():
    return split_samples(signal_samples(240), 0.25, seed=0)


@pytest.fixture(scope="module")
def trained(sig_data):
    train, _ = sig_data
    return {k: make_predictor(k, 3, **FAST).fit(train, seed=0) for k in ("graphsage", "rgcn")}


# ---------------------------------------------------------------- samples and expansion
def test_samples_group_interleaved_workflows_in_call_order():
    def c(w, i, agent, last=None, sig=None):
        return Call(w, i, 32, 4, [i + 1, i + 2], agent=agent, last=last, signal=sig)
    calls = [c("x", 0, "p"), c("y", 0, "q", sig=[1.0]), c("x", 1, "r", last=True), c("y", 1, None)]
    s = samples_from_calls(calls, block_size=16)
    assert [x.workflow for x in s] == ["x", "y"]
    assert s[0].agents == ["p", "r"] and s[0].signals == [None, None]
    assert s[1].agents[0] == "q" and s[1].agents[1].startswith("anchor:")  # no agent: anchor name
    assert s[1].signals == [[1.0], None]
    assert [x.workflow for x in samples_from_calls(calls, 16, max_workflows=1)] == ["x"]


def test_expansion_targets_and_signals():
    ex = expand([wf("w", "a b c", [[1.0], [2.0], None])], horizon=2)
    assert [s.path for s in ex.states] == [["a"], ["a", "b"], ["a", "b", "c"]]
    assert [s.signal for s in ex.states] == [[1.0], [2.0], None]
    assert ex.targets == [["b", "c"], ["c", END], [END, END]]


def test_split_is_by_workflow_seeded_and_complete():
    s = [wf(f"w{i}", "a b") for i in range(50)]
    tr, he = split_samples(s, 0.2, seed=3)
    assert len(he) == 10 and len(tr) == 40
    assert {x.workflow for x in tr} | {x.workflow for x in he} == {x.workflow for x in s}
    assert [x.workflow for x in split_samples(s, 0.2, seed=3)[1]] == [x.workflow for x in he]
    assert [x.workflow for x in split_samples(s, 0.2, seed=4)[1]] != [x.workflow for x in he]
    assert split_samples(s[:2], 0.01, 0)[1] and split_samples(s, 0.0, 0)[1] == []


# ---------------------------------------------------------------- markov
def test_markov_deterministic_chain_is_exact():
    m = MarkovPredictor(horizon=4, eps=0.0).fit([wf("w", "a b c")] * 3)
    out = m.predict_batch([PathState(["a"]), PathState(["b"]), PathState([])])
    b, c, end = 1, 2, 3          # agents a, b, c and END, in that order
    assert np.array_equal(out[0].argmax(axis=1), [b, c, end, end]) and np.allclose(out[0].max(axis=1), 1)
    assert np.allclose(out[1, :, end], [0, 1, 1, 1]) and out[1, 0, c] == 1.0
    assert np.allclose(out[2, 0], [1, 0, 0, 0]) and out[2, 3, end] == 1.0   # empty path: start


def test_markov_k_steps_are_matrix_powers():
    m = MarkovPredictor(horizon=3, eps=0.1).fit([wf("1", "a b a"), wf("2", "a a"), wf("3", "b a b")])
    t = m.transition_matrix()
    assert np.allclose(t.sum(axis=1), 1) and t[-1, -1] == 1.0
    out = m.predict_batch([PathState(["x", "b"])])[0]
    for k in range(3):
        assert np.allclose(out[k], np.linalg.matrix_power(t, k + 1)[1])
    unseen = m.predict_batch([PathState(["zzz"])])[0]
    assert np.allclose(unseen.sum(axis=1), 1)


# ---------------------------------------------------------------- graph
def test_call_graph_nodes_edges_and_features():
    g = build_graph([wf("1", "a b c", [[1.0, 0.0]] * 3), wf("2", "a b b"), wf("3", "a c")])
    assert g.agents == ["a", "b", "c"] and g.unknown == 3 and g.x.shape[0] == 4
    fwd = {(int(s), int(d)): int(n) for s, d, t, n in zip(*g.edge_index, g.edge_type, g.edge_count) if t == FORWARD}
    assert fwd == {(0, 1): 2, (1, 2): 1, (1, 1): 1, (0, 2): 1}
    rev = {(int(s), int(d)) for s, d, t in zip(*g.edge_index, g.edge_type) if t == REVERSE}
    assert rev == {(d, s) for s, d in fwd}
    loops = {int(s) for s, d, t in zip(*g.edge_index, g.edge_type) if t == SELF and s == d}
    assert loops == {0, 1, 2, 3}
    assert np.all(g.x[g.unknown] == 0) and np.isfinite(g.x).all()
    assert g.signal.dim == 2 and g.x.shape[1] > 2


# ---------------------------------------------------------------- neural models
@pytest.mark.parametrize("kind", ["graphsage", "rgcn"])
def test_neural_uses_the_signal_and_beats_markov(kind, sig_data, trained):
    train, held = sig_data
    markov = MarkovPredictor(3).fit(train)
    ours, base = evaluate(trained[kind], held), evaluate(markov, held)
    assert ours[0].top1 > 0.95 > base[0].top1 and ours[0].log_loss < base[0].log_loss
    # at the router the branch is in the signal only: a coin for Markov, near-certain with it
    routers = [PathState(["router"], w.signals[0]) for w in held]
    truth = [(markov.agents + [END]).index(w.agents[1]) for w in held]
    acc = {n: np.mean(p.predict_batch(routers)[:, 0].argmax(axis=1) == truth)
           for n, p in (("ours", trained[kind]), ("markov", markov))}
    assert acc["ours"] > 0.95 and acc["markov"] < 0.7


def test_team_workload_graphsage_matches_or_beats_markov():
    s = samples_from_workload("team", 150, seed=1)
    tr, he = split_samples(s, 0.25, seed=1)
    _, ours = fit_and_evaluate("graphsage", tr, he, 4, 0, **FAST)
    _, base = fit_and_evaluate("markov", tr, he, 4, 0)
    assert ours.steps[0].top1 >= base.steps[0].top1 - 0.01
    assert ours.train_seconds < 30


@pytest.mark.parametrize("kind", ["graphsage", "rgcn", "markov"])
def test_save_load_round_trip_is_identical(kind, tmp_path, sig_data, trained):
    p = trained[kind] if kind in trained else MarkovPredictor(3).fit(sig_data[0])
    p.save(str(tmp_path / "m.pt"))
    q = load_predictor(tmp_path / "m.pt")
    assert type(q) is type(p) and q.agents == p.agents and q.horizon == p.horizon
    states = expand(sig_data[1][:20], 3).states
    assert np.array_equal(p.predict_batch(states), q.predict_batch(states))


@pytest.mark.parametrize("kind", ["graphsage", "rgcn"])
def test_rows_sum_to_one_and_odd_states_do_not_crash(kind, trained):
    p = trained[kind]
    states = [PathState([]), PathState(["nobody"]), PathState(["router"], None),
              PathState(["router"], [5.0]), PathState(["router"], [1.0] * 30),
              PathState(["left", "nobody", "router"] * 30, [0.1, 0.2, 0.3, 0.4]), PathState(["writer"], [])]
    out = p.predict_batch(states)
    assert out.shape == (len(states), 3, len(p.agents) + 1)
    assert np.isfinite(out).all() and np.allclose(out.sum(axis=2), 1.0)
    assert p.predict_batch([]).shape == (0, 3, len(p.agents) + 1)


def test_training_is_deterministic_by_seed(sig_data):
    train, held = sig_data
    states = expand(held[:10], 2).states
    small = {"epochs": 3, "hidden": 16, "heads": 2}
    a = make_predictor("graphsage", 2, **small).fit(train, seed=5).predict_batch(states)
    b = make_predictor("graphsage", 2, **small).fit(train, seed=5).predict_batch(states)
    c = make_predictor("graphsage", 2, **small).fit(train, seed=6).predict_batch(states)
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_evaluate_floors_outcomes_the_predictor_cannot_name():
    m = MarkovPredictor(1).fit([wf("1", "a b")])
    steps = evaluate(m, [wf("2", "a zzz")])
    assert steps[0].samples == 2 and steps[0].top1 <= 0.5
    assert -np.log(PROB_FLOOR) / 2 <= steps[0].log_loss < np.inf


# ---------------------------------------------------------------- io and CLI
def test_io_errors_are_user_errors(tmp_path):
    with pytest.raises(AgentrtError):
        make_predictor("lstm")
    with pytest.raises(AgentrtError):
        make_predictor("graphsage", 4, no_such_option=1)
    with pytest.raises(AgentrtError):
        load_predictor(tmp_path / "missing.pt")
    (tmp_path / "junk.pt").write_text("not a model")
    with pytest.raises(AgentrtError):
        load_predictor(tmp_path / "junk.pt")
    assert make_predictor("markov", 2, epochs=9).horizon == 2   # epochs ignored by markov
    with pytest.raises(AgentrtError):
        train_predictor("markov", [], 2)


def test_train_command_saves_and_reports_against_markov(tmp_path):
    import typer
    from typer.testing import CliRunner

    from agentrt.commands.predict import register_commands
    from agentrt.trace.writer import write_trace
    from agentrt.workloads.base import GenConfig
    from agentrt.workloads.registry import get_workload

    app = typer.Typer()
    register_commands(app)
    app.command("noop")(lambda: None)   # a second command keeps `train` a subcommand
    wl, cfg = get_workload("team"), GenConfig(workflows=40, seed=2)
    trace = tmp_path / "t.jsonl"
    write_trace(trace, wl.header(cfg), wl.generate(cfg))
    out, js = tmp_path / "m.pt", tmp_path / "r.json"
    res = CliRunner().invoke(app, ["train", "--trace", str(trace), "-o", str(out), "--epochs", "3",
                                   "--horizon", "2", "--json", str(js)])
    assert res.exit_code == 0, (res.output, res.exception)
    assert "markov top-1" in res.output and "graphsage log loss" in res.output
    doc = json.loads(js.read_text())
    assert [r["kind"] for r in doc["reports"]] == ["graphsage", "markov"]
    assert len(doc["reports"][0]["steps"]) == 2
    assert load_predictor(out).horizon == 2
    res = CliRunner().invoke(app, ["train", "--workload", "team", "-o", str(out), "--predictor-kind", "x"])
    assert isinstance(res.exception, AgentrtError)

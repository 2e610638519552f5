"""One train/eval split for `agentrt train` and `agentrt bench`: the shared split rule, the
provenance a saved predictor records, the hold-back of a predictor's training workflows in a
bench, and the warnings (a predictor of unknown provenance, a trace without agent identity)."""

from __future__ import annotations

import hashlib
import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from agentrt.bench.runner import BenchOptions, plan_split, run_bench
from agentrt.bench.source import BenchWarning, file_source, workload_source
from agentrt.errors import AgentrtError
from agentrt.predict.io import load_predictor
from agentrt.predict.markov import MarkovPredictor
from agentrt.predict.provenance import digest_of, read_provenance, workflow_digests
from agentrt.predict.samples import samples_from_calls
from agentrt.workloads.base import GenConfig

pytest.importorskip("torch")   # predictor files are torch.save'd


def _gen(path: Path, workflows: int, seed: int = 2) -> Path:
    from agentrt.trace.writer import write_trace
    from agentrt.workloads.registry import get_workload
    wl, cfg = get_workload("team"), GenConfig(workflows=workflows, seed=seed)
    write_trace(path, wl.header(cfg), wl.generate(cfg))
    return path


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> Path:
    return _gen(tmp_path_factory.mktemp("split") / "team.jsonl", 40)


def _train(*args: str):
    import typer
    from typer.testing import CliRunner

    from agentrt.commands.predict import register_commands
    app = typer.Typer()
    register_commands(app)
    app.command("noop")(lambda: None)   # a second command keeps `train` a subcommand
    return CliRunner().invoke(app, ["train", "--predictor-kind", "markov", *args])


def _trained(trace: Path, out: Path, *args: str) -> Path:
    res = _train("--trace", str(trace), "-o", str(out), *args)
    assert res.exit_code == 0, (res.output, res.exception)
    return out


def _opts(model: Path, **kw) -> BenchOptions:
    return BenchOptions(policy_options={"pbkv-he": {"predictor": str(model), "predictor_kind": "markov"}},
                        **kw)


# ---------------------------------------------------------------- one split, recorded
def test_train_fits_on_the_bench_split_and_records_it(trace, tmp_path):
    model = _trained(trace, tmp_path / "m.pt", "--json", str(tmp_path / "r.json"))
    source = file_source(trace)
    assert plan_split(source, ["lru", "kvflow"], BenchOptions())["workflows"] == 10   # bench: 25%
    assert source.split_size(0.25) == 10
    prov = read_provenance(model)
    assert prov["trace"] == str(trace)
    assert prov["trace_sha256"] == hashlib.sha256(trace.read_bytes()).hexdigest()
    assert (prov["workflows"], prov["train_fraction"], prov["train_workflows"]) == (40, 0.25, 10)
    assert prov["train_digests"] == source.workflow_digests()[:10] == workflow_digests(source.train_calls())
    assert prov["train_sha256"] == digest_of(prov["train_digests"])
    assert len(set(source.workflow_digests())) == 40
    # it was fitted on exactly the bench's training split, and reports on the rest
    pred = load_predictor(model)
    assert pred.provenance == prov
    ref = MarkovPredictor(pred.horizon).fit(samples_from_calls(source.train_calls(), 16))
    assert pred.agents == ref.agents and np.array_equal(pred.counts, ref.counts)
    rep = json.loads((tmp_path / "r.json").read_text())
    assert rep["provenance"]["train_workflows"] == 10 and "train_digests" not in rep["provenance"]
    assert (rep["reports"][0]["train_workflows"], rep["reports"][0]["heldout_workflows"]) == (10, 30)


def test_train_rejects_a_split_with_nothing_in_it(trace, tmp_path):
    for frac in ("1.0", "0.01"):
        res = _train("--trace", str(trace), "-o", str(tmp_path / "m.pt"), "--train-fraction", frac)
        assert isinstance(res.exception, AgentrtError), res.output
        assert "--train-fraction" in str(res.exception)


# ---------------------------------------------------------------- the bench holds back
def test_bench_holds_back_every_workflow_the_predictor_was_trained_on(trace, tmp_path):
    model = _trained(trace, tmp_path / "half.pt", "--train-fraction", "0.5")
    doc = run_bench(file_source(trace), ["lru", "pbkv-he"], _opts(model, gpu_blocks=2000))
    split = doc["config"]["train"]
    assert split["workflows"] == 20 and doc["workflows"] == 20
    assert str(model) in split["note"] and "held back" in split["note"]
    # a smaller bench split, or a separate training trace, cannot bring them back
    source = file_source(trace)
    assert plan_split(source, ["lru", "pbkv-he"], _opts(model, train_fraction=0.1))["workflows"] == 20
    assert source.train_workflows == 20
    other = _gen(tmp_path / "other.jsonl", 12, seed=5)
    split = plan_split(source, ["lru", "pbkv-he"], _opts(model, train_path=str(other)))
    assert split["source"] == str(other) and split["workflows"] == 20 and source.train_workflows == 20
    # the same workflows generated again, with more after them, are recognised by content
    regen = workload_source("team", GenConfig(workflows=60, seed=2, concurrency=64))
    try:
        assert plan_split(regen, ["lru", "pbkv-he"], _opts(model))["workflows"] == 20
    finally:
        regen.close()


def test_a_predictor_inside_the_bench_split_changes_nothing(trace, tmp_path):
    model = _trained(trace, tmp_path / "q.pt")                       # the first 10 of 40
    split = plan_split(file_source(trace), ["lru", "pbkv-he"], _opts(model))
    assert split["workflows"] == 10 and "within the held-back split" in split["note"]


def test_a_predictor_of_another_trace_holds_back_nothing_more(trace, tmp_path):
    model = _trained(_gen(tmp_path / "seed3.jsonl", 40, seed=3), tmp_path / "s3.pt", "--train-fraction", "0.5")
    split = plan_split(file_source(trace), ["lru", "pbkv-he"], _opts(model))
    assert split["workflows"] == 10 and "none of them in this trace" in split["note"]


def test_a_predictor_trained_on_the_whole_trace_is_refused(trace, tmp_path):
    model = _trained(trace, tmp_path / "half.pt", "--train-fraction", "0.5")   # the first 20
    prefix = _gen(tmp_path / "prefix.jsonl", 20)                                # exactly those
    with pytest.raises(AgentrtError, match="no workflow is left"):
        plan_split(file_source(prefix), ["lru", "pbkv-he"], _opts(model))


def test_a_predictor_of_unknown_provenance_warns(trace, tmp_path):
    source = file_source(trace)
    old = tmp_path / "old.pt"
    MarkovPredictor(2).fit(samples_from_calls(source.train_calls(), 16)).save(str(old))
    assert read_provenance(old) is None and load_predictor(old).provenance is None
    with pytest.warns(BenchWarning, match="does not record what it was trained on"):
        split = plan_split(source, ["lru", "pbkv-he"], _opts(old))
    assert split["workflows"] == 10


# ---------------------------------------------------------------- agent identity
def test_a_trace_without_agents_warns_agent_aware_policies(trace, tmp_path):
    bare = tmp_path / "bare.jsonl"
    lines = []
    for line in trace.read_text().splitlines():
        obj = json.loads(line)
        obj.pop("agent", None)
        lines.append(json.dumps(obj))
    bare.write_text("\n".join(lines) + "\n")
    source = file_source(bare)
    assert source.agent_calls == 0 and file_source(trace).agent_calls > 0
    with warnings.catch_warnings():
        warnings.simplefilter("error", BenchWarning)
        plan_split(source, ["lru"], BenchOptions())                  # LRU knows no agents
        plan_split(file_source(trace), ["cachesage"], BenchOptions())  # the trace names them
    with pytest.warns(BenchWarning, match="no call names its agent") as rec:
        plan_split(source, ["lru", "cachesage", "kvflow"], BenchOptions())
    msg = str(rec[0].message)
    assert "cachesage, kvflow" in msg and "lru" not in msg and "prompt anchors" in msg

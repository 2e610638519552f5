"""The overload check of `agentrt bench` (bench/overload.py): an open-loop replay whose arrivals
outpace the replica is flagged with a stretch that brings it to about 80% load; a stable or
closed-loop replay is not."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agentrt.bench.overload import _round_up, check_overload, overload_doc, overload_text

REPO = Path(__file__).resolve().parents[1]
SCHEMA = json.loads((REPO / "docs" / "results-schema.json").read_text())
MOONCAKE = REPO.parent / "shared" / "traces" / "mooncake" / "conversation_trace.jsonl"


def doc(span=100.0, drain=80.0, wait=30.0, ttft=31.0, concurrency=None, time_scale=1.0,
        replicas=None, results=None, calls=100, wait90=None):
    r = {"arrival_span_s": span, "drain_s": drain, "wait_p50_s": wait, "ttft_p50_s": ttft, "calls": calls,
         "wait_p90_s": wait if wait90 is None else wait90}
    cfg = {"concurrency": concurrency, "time_scale": time_scale}
    if replicas:
        cfg["replicas"] = replicas
    return {"config": cfg, "results": results if results is not None else {"lru": r, "pbkv-ta": dict(r)},
            "lru_reference": None}


def test_an_overloaded_open_loop_replay_is_flagged_with_a_stretch_to_80_percent():
    o = check_overload(doc(span=100.0, drain=80.0))
    assert o is not None and o.reference == "lru"
    # busy 180 s for 100 s of arrivals: x 180 / 80 = 2.25
    assert o.suggested_time_scale == 2.3 and o.suggested_replicas == 3
    # the stretch multiplies the one already applied; replicas multiply too
    o = check_overload(doc(span=100.0, drain=80.0, time_scale=2.0, replicas=2))
    assert o.suggested_time_scale == 4.5 and o.suggested_replicas == 5 and o.replicas == 2
    text = overload_text(overload_doc(o))
    assert "the 2 replicas" in text and "--time-scale 4.5" in text and "--replicas 5" in text


@pytest.mark.parametrize("kw", [
    {"concurrency": 16},                 # closed loop: the queue is bounded by the concurrency
    {"drain": 20.0},                     # the backlog cleared within a quarter of the span
    {"wait": 0.0, "ttft": 1.0},          # the first tokens came at once: the last call decodes long
    {"calls": 2},                        # two calls at once: a burst, not a queue
])
def test_a_closed_loop_a_stable_queue_or_a_long_last_call_is_not_flagged(kw):
    assert check_overload(doc(**kw)) is None


def test_bursts_that_saturate_a_replica_which_keeps_up_overall_are_flagged_without_a_stretch():
    # the backlog clears at once, but a tenth of the calls waited 40 s for admission against a
    # median TTFT of 2 s: the tails measure the bursts' queue
    o = check_overload(doc(drain=1.0, wait=0.1, ttft=2.0, wait90=40.0))
    assert o is not None and o.kind == "bursts" and o.wait_p90_s == 40.0
    assert o.suggested_time_scale is None and o.suggested_replicas is None
    text = overload_text(overload_doc(o))
    assert text.startswith("saturated in bursts") and "40.0 s for admission" in text and "one instant" not in text
    # a p90 wait within twice the median TTFT (an engine iteration or two) is no burst queue
    assert check_overload(doc(drain=1.0, wait=0.0, ttft=2.0, wait90=3.9)) is None
    # a sustained overload is reported as such, with its stretch, whatever its p90 wait
    assert check_overload(doc(wait90=500.0)).kind == "sustained"
    # closed loops and short runs are not judged for bursts either
    assert check_overload(doc(drain=1.0, ttft=2.0, wait90=40.0, concurrency=8)) is None
    assert check_overload(doc(drain=1.0, ttft=2.0, wait90=40.0, calls=5)) is None


def test_every_call_at_one_instant_is_flagged_without_a_stretch():
    o = check_overload(doc(span=0.0, drain=50.0))
    assert o is not None and o.suggested_time_scale is None and o.suggested_replicas is None
    assert "one instant" in overload_text(overload_doc(o))


def test_the_reference_is_lru_shown_or_hidden_else_the_first_policy():
    hidden = doc(results={"oracle": {"bound": True, "arrival_span_s": 100.0, "drain_s": 0.0,
                                     "wait_p50_s": 0.0, "ttft_p50_s": 1.0, "calls": 100}})
    assert check_overload(hidden) is None
    hidden["lru_reference"] = {"arrival_span_s": 100.0, "drain_s": 80.0, "wait_p50_s": 30.0, "ttft_p50_s": 31.0,
                               "calls": 100}
    assert check_overload(hidden).reference == "lru"
    first = doc(results={"cachesage": {"arrival_span_s": 100.0, "drain_s": 80.0, "wait_p50_s": 30.0,
                                       "ttft_p50_s": 31.0, "calls": 100}})
    assert check_overload(first).reference == "cachesage"
    # a document without the fields (an older one, or a live engine's) is not judged
    assert check_overload({"config": {}, "results": {"lru": {"hit_rate": 0.5}}}) is None


@pytest.mark.parametrize("x,want", [(2.25, 2.3), (2.2, 2.2), (14.2, 15.0), (0.123, 0.13), (100.0, 100.0)])
def test_round_up_to_two_significant_digits(x, want):
    assert _round_up(x) == pytest.approx(want)


def write_burst(path: Path, n: int = 120, gap_ms: int = 40, tokens: int = 4096) -> Path:
    """Mooncake-format requests, `gap_ms` apart, each prompt its own (no shared prefix)."""
    with path.open("w") as f:
        for i in range(n):
            blocks = tokens // 512
            f.write(json.dumps({"timestamp": i * gap_ms, "input_length": tokens, "output_length": 64,
                                "hash_ids": list(range(i * blocks, (i + 1) * blocks))}) + "\n")
    return path


def bench(*args: str) -> tuple[subprocess.CompletedProcess, dict]:
    out = Path(args[args.index("--json") + 1])
    p = subprocess.run([sys.executable, "-m", "agentrt.cli", "bench", *args], capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return p, json.loads(out.read_text())


def test_cli_flags_an_overloaded_trace_and_its_suggestion_is_not_overloaded(tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    trace = write_burst(tmp_path / "burst.jsonl")
    p, d = bench("--trace", str(trace), "--policies", "lru", "--quiet", "--json", str(tmp_path / "a.json"))
    o = d["overload"]
    assert o is not None and "overloaded: the arrivals outpace the replica" in p.stdout
    assert o["drain_s"] > o["arrival_span_s"] / 4 and o["suggested_time_scale"] > 1
    assert f"--time-scale {o['suggested_time_scale']:g}" in " ".join(p.stdout.split())
    jsonschema.Draft202012Validator(SCHEMA).validate(d)
    p, d = bench("--trace", str(trace), "--policies", "lru", "--quiet", "--time-scale",
                 str(o["suggested_time_scale"]), "--json", str(tmp_path / "b.json"))
    assert d["overload"] is None and "outpace" not in p.stdout
    r = d["results"]["lru"]
    assert r["drain_s"] < r["arrival_span_s"] / 4
    jsonschema.Draft202012Validator(SCHEMA).validate(d)


def test_cluster_runs_are_checked_per_replica_count(tmp_path):
    trace = write_burst(tmp_path / "burst.jsonl")
    _, one = bench("--trace", str(trace), "--policies", "lru", "--quiet", "--json", str(tmp_path / "1.json"))
    n = one["overload"]["suggested_replicas"]
    _, many = bench("--trace", str(trace), "--policies", "lru", "--quiet", "--replicas", str(n),
                    "--router", "least-loaded", "--json", str(tmp_path / "n.json"))
    assert many["overload"] is None
    assert many["results"]["lru"]["arrival_span_s"] == pytest.approx(one["results"]["lru"]["arrival_span_s"])


@pytest.mark.slow
@pytest.mark.skipif(not MOONCAKE.exists(), reason=f"{MOONCAKE} not found (../shared/traces is absent)")
def test_mooncake_conversation_trace_overloaded_at_its_rate_in_bursts_at_a_third_not_at_an_eighth(tmp_path):
    _, d = bench("--trace", str(MOONCAKE), "--policies", "lru", "--quiet", "--json", str(tmp_path / "m.json"))
    assert d["overload"] is not None and d["overload"]["kind"] == "sustained"
    assert d["overload"]["suggested_time_scale"] > 2
    p, d = bench("--trace", str(MOONCAKE), "--policies", "lru", "--quiet", "--time-scale", "3",
                 "--json", str(tmp_path / "m3.json"))
    o = d["overload"]
    assert o is not None and o["kind"] == "bursts" and o["suggested_time_scale"] is None
    assert o["wait_p90_s"] > 2 * o["ttft_p50_s"] and o["drain_s"] < o["arrival_span_s"] / 4
    assert "saturated in bursts" in p.stdout
    _, d = bench("--trace", str(MOONCAKE), "--policies", "lru", "--quiet", "--time-scale", "8",
                 "--json", str(tmp_path / "m8.json"))
    assert d["overload"] is None

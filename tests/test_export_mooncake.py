"""`agentrt export mooncake`: replayed arrival times as Mooncake lines, read by vLLM's own loader."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentrt.bench.mooncake import export_mooncake, meta_path
from agentrt.bench.runner import BenchOptions
from agentrt.bench.source import file_source, workload_source
from agentrt.trace.schema import Call, TraceHeader
from agentrt.trace.writer import write_trace
from agentrt.workloads.base import GenConfig
from vllm_support import requires_vllm

ROOT = Path(__file__).resolve().parents[1]
KEYS = ["timestamp", "input_length", "output_length", "hash_ids"]


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def two_tenants(path: Path) -> Path:
    """Two one-call-then-tool workflows of two tenants using the same raw hash ids."""
    calls = []
    for i, tenant in enumerate(("a", "b")):
        calls += [Call(f"w{i}", 0, 40, 200, [1, 2, 3], agent="x", timestamp=0.0, tenant=tenant),
                  Call(f"w{i}", 1, 56, 4, [1, 2, 3, 4], agent="x", after=(0,), think_ms=2000.0 * (i + 1),
                       tenant=tenant, last=True)]
    write_trace(path, TraceHeader(block_size=16), calls)
    return path


def test_lines_are_sorted_mooncake_with_arrivals_of_the_replay(tmp_path):
    out = tmp_path / "m.jsonl"
    e = export_mooncake(file_source(two_tenants(tmp_path / "t.jsonl")), BenchOptions(), out)
    got = lines(out)
    assert e.requests == 4 and e.block_size == 16
    assert all(list(x) == KEYS and type(x["timestamp"]) is int for x in got)
    ts = [x["timestamp"] for x in got]
    assert ts == sorted(ts) and ts[:2] == [0, 0]
    # later calls: released 2 s / 4 s after their predecessors finished decoding 200 tokens
    # together (not at a trace timestamp)
    assert ts[2] > 2100 and ts[3] - ts[2] == pytest.approx(2000, abs=2)
    # tenants never share a block: the same raw ids become distinct ids; chains stay chained
    first = {tuple(x["hash_ids"]) for x in got if x["input_length"] == 40}
    assert len(first) == 2 and not set(got[0]["hash_ids"]) & set(got[1]["hash_ids"])
    for x in got[2:]:
        assert tuple(x["hash_ids"][:3]) in first
    meta = json.loads(meta_path(out).read_text())
    assert meta["block_size"] == 16 and meta["requests"] == 4
    assert meta["vllm_bench_serve_flags"][-6:] == ["--timed-trace-chunk-hash-size", "16",
                                                    "--timed-trace-sec-multiplier", "0.001",
                                                    "--num-prompts", "4"]


def test_closed_loop_concurrency_spaces_workflows(tmp_path):
    out = tmp_path / "m.jsonl"
    export_mooncake(file_source(two_tenants(tmp_path / "t.jsonl")), BenchOptions(concurrency=1), out)
    ts = [x["timestamp"] for x in lines(out)]
    assert ts[1] > 2000 and ts[2] > ts[1]          # the second workflow starts when the first ends


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, "-m", "agentrt.cli", *args], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=120)


@pytest.mark.parametrize("args,text", [
    (["-o", "m.jsonl"], "give a trace file or --workload"),
    (["t.jsonl", "--workload", "mix", "-o", "m.jsonl"], "give a trace file or --workload"),
    (["--workload", "mix", "-o", "m.jsonl.gz"], "plain JSON Lines"),
    (["t.jsonl", "--workflows", "3", "-o", "m.jsonl"], "--workflows and --tool-scale"),
    (["--workload", "nope", "-o", "m.jsonl"], "unknown workload"),
    (["missing.jsonl", "-o", "m.jsonl"], "no such file"),
])
def test_cli_errors(tmp_path, args, text):
    two_tenants(tmp_path / "t.jsonl")
    p = cli("export", "mooncake", *args, cwd=tmp_path)
    assert p.returncode == 2 and p.stderr.startswith("error: ") and text in p.stderr, p.stderr
    assert not (tmp_path / "m.jsonl").exists()


def test_cli_workload_prints_the_client_flags(tmp_path):
    p = cli("export", "mooncake", "--workload", "mix", "--workflows", "4", "-o", "m.jsonl",
            "--gpu-blocks", "2000", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    n = len(lines(tmp_path / "m.jsonl"))
    assert f"--timed-trace-chunk-hash-size 16 --timed-trace-sec-multiplier 0.001 --num-prompts {n}" in p.stdout
    assert json.loads((tmp_path / "m.jsonl.meta.json").read_text())["replay"]["gpu_blocks"] == 2000


class VocabTokenizer:
    """All vLLM's loader asks of a tokenizer: a vocabulary and the special ids to leave out."""
    all_special_ids = [0, 1]

    def get_vocab(self) -> dict[str, int]:
        return {f"t{i}": i for i in range(512)}


@pytest.mark.slow
@requires_vllm
def test_vllm_timed_trace_loader_reads_the_export(tmp_path, monkeypatch):
    from vllm.benchmarks.datasets.datasets import TimedTrace, get_samples
    from vllm.benchmarks.serve import add_cli_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    src = workload_source("mix", GenConfig(workflows=6, concurrency=3))
    try:
        export_mooncake(src, BenchOptions(gpu_blocks=3000), tmp_path / "m.jsonl")
    finally:
        src.close()
    monkeypatch.chdir(tmp_path)          # the flags name the file as -o gave it
    meta = json.loads(meta_path("m.jsonl").read_text())
    parser = FlexibleArgumentParser()
    add_cli_args(parser)                 # `vllm bench serve`'s own flags, parsed as the client does
    args = parser.parse_args(meta["vllm_bench_serve_flags"])
    reqs = get_samples(args, VocabTokenizer())
    rows = lines(tmp_path / "m.jsonl")
    assert len(reqs) == len(rows) == meta["requests"] > 20
    assert [r.prompt_len for r in reqs] == [x["input_length"] for x in rows]
    assert [r.expected_output_len for r in reqs] == [x["output_length"] for x in rows]
    assert [r.timestamp for r in reqs] == pytest.approx([x["timestamp"] / 1000 for x in rows])
    bs = meta["block_size"]
    pairs = 0
    for i in range(len(rows)):
        for j in range(i):
            a, b = rows[i]["hash_ids"], rows[j]["hash_ids"]
            k = next((n for n, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            full = min(k, rows[i]["input_length"] // bs, rows[j]["input_length"] // bs)
            pa, pb = reqs[i].prompt, reqs[j].prompt
            assert pa[:full * bs] == pb[:full * bs]           # shared hash ids: shared prefix
            if full < k or full == len(a) or full == len(b):
                continue
            assert pa[:(full + 1) * bs] != pb[:(full + 1) * bs]   # and no further
            pairs += full > 0
    assert pairs > 10
    # a smaller chunk size shrinks every prompt and keeps the sharing
    small = TimedTrace(**{**vars(args), "timed_trace_chunk_hash_size": 4}).sample(VocabTokenizer(), len(rows))
    assert all(s.prompt_len < r.prompt_len for s, r in zip(small, reqs))

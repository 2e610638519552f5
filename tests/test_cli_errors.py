"""Every user error of the `agentrt` command line: one `error: ...` line on stderr, exit status 2,
no traceback, no usage text, and nothing generated or replayed before the check.

Most cases call `agentrt.cli.main()` in-process (fast); a few go through a subprocess to check
the real entry point."""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest

import agentrt
from agentrt import cli


def run_main(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `agentrt ARGS` run in this process."""
    monkeypatch.setattr(warnings, "showwarning", warnings.showwarning)   # main() replaces it
    monkeypatch.setattr(sys, "argv", ["agentrt", *args])
    with pytest.raises(SystemExit) as exc:
        cli.main()
    out, err = capsys.readouterr()
    return exc.value.code, out, err


@pytest.fixture
def no_work(monkeypatch):
    """Fail the test if a bench opens its trace or generates its workload."""
    import agentrt.bench.spec as spec

    def boom(*a, **k):
        raise AssertionError("work started before the options were checked")
    monkeypatch.setattr(spec, "workload_source", boom)
    monkeypatch.setattr(spec, "file_source", boom)


def one_error_line(code: int, err: str) -> str:
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err and "Usage:" not in err
    return lines[0]


def error_of(monkeypatch, capsys, *args: str) -> str:
    code, _, err = run_main(monkeypatch, capsys, *args)
    return one_error_line(code, err)


PARSER_ERRORS = [
    (["benchh"], "No such command 'benchh'"),
    (["bench", "--gpu-blocks", "abc"], "--gpu-blocks"),
    (["bench", "--nope"], "No such option: --nope"),
    (["generate"], "Missing argument"),
    (["generate", "mix"], "Missing option '-o'"),
    (["bench", "--workflows"], "requires an argument"),
]


@pytest.mark.parametrize("args,msg", PARSER_ERRORS, ids=[" ".join(a) for a, _ in PARSER_ERRORS])
def test_parser_errors_are_one_line(monkeypatch, capsys, args, msg):
    line = error_of(monkeypatch, capsys, *args)
    assert msg in line and "--help" in line


def bad_values(tmp):
    d = str(tmp)
    return [
        (["bench", "--workflows", "0"], "--workflows must be from 1 to 1,000,000 (a generated workload is held in memory), got 0"),
        (["bench", "--workflows", "100000000"], "--workflows must be from 1 to 1,000,000"),
        (["bench", "--concurrency", "0"], "--concurrency must be > 0, got 0"),
        (["bench", "--seed", "-1"], "--seed must be >= 0, got -1"),
        (["bench", "--gpu-blocks", "-5"], "--gpu-blocks must be > 0"),
        (["bench", "--time-scale", "0"], "--time-scale must be > 0"),
        (["bench", "--train-fraction", "1.5"], "--train-fraction must be in [0, 1)"),
        (["bench", "--trace", d], f"--trace {d}: is a directory"),
        (["bench", "--trace", f"{d}/missing.jsonl"], "no such file"),
        (["bench", "--train", d], f"--train {d}: is a directory"),
        (["bench", "--json", d], f"--json {d}: is a directory"),
        (["bench", "--csv", d], f"--csv {d}: is a directory"),
        (["bench", "--plot", d], f"--plot {d}: is a directory"),
        (["bench", "--plot", f"{d}/fig.foo"], ".png"),
        (["bench", "--json", f"{d}/r.txt"], "must end in .json"),
        (["bench", "--set", "cachesage.nope=3"], "valid options of cachesage: lookahead, window"),
        (["bench", "--set", "pbkv.gamma=2"], "gamma must be in (0, 1]"),
        (["bench", "--set", "pbkv-ta.online=maybe"], "online must be true or false, got 'maybe'"),
        (["bench", "--set", "lookahead=3"], "expected POLICY.OPTION=VALUE"),
        (["bench", "--policies", "lru,nope"], "unknown policy 'nope'"),
        (["bench", "--workload", "nope"], "unknown workload 'nope'"),
        (["bench", "--preset", "tpu"], "unknown preset 'tpu'"),
        (["bench", "--engine", "tpu"], "--engine must be sim or vllm"),
        (["bench", "--cache-at", "later"], "--cache-at must be one of prefill, schedule, got 'later'"),
        (["bench", "--cache-at", ""], "--cache-at must be one of prefill, schedule, got ''"),
        (["bench", "--engine", "vllm", "--cache-at", "schedule"], "--cache-at is for the simulator"),
        (["bench", "--policies", "pbkv", "--predictor", f"{d}/p.pt"], "--predictor"),
    ]


def test_bad_bench_values_fail_before_any_work(monkeypatch, capsys, tmp_path, no_work):
    for args, msg in bad_values(tmp_path):
        line = error_of(monkeypatch, capsys, *args)
        assert msg in line, (args, line)
    assert not list(tmp_path.iterdir())      # nothing written


def test_other_commands_check_their_values_and_paths(monkeypatch, capsys, tmp_path):
    d, f = str(tmp_path), str(tmp_path / "t.jsonl")
    cases = [
        (["generate", "mix", "-o", f, "--block-size", "0"], "--block-size must be in 1..1,048,576 (what a trace holds), got 0"),
        (["generate", "mix", "-o", f, "--workflows", "0"], "--workflows must be from 1 to 1,000,000"),
        (["generate", "random", "-o", f, "--seed", "-1"], "--seed must be >= 0, got -1"),
        (["train", "--workload", "mix", "-o", f, "--seed", "-1"], "--seed must be >= 0, got -1"),
        (["generate", "mix", "-o", f, "--tool-scale", "0"], "--tool-scale must be > 0"),
        (["generate", "mix", "-o", d], f"-o {d}: is a directory"),
        (["generate", "mix", "-o", f, "--rate", "1", "--concurrency", "2"], "either --rate or --concurrency"),
        (["stats", d], "is a directory"),
        (["import", "ag2", f"{d}/missing", "-o", f], "no such directory"),
        (["import", "ag2", d, "-o", d], f"-o {d}: is a directory"),
        (["train", "--workload", "mix", "-o", d], f"-o {d}: is a directory"),
        (["train", "--trace", d, "-o", f], f"--trace {d}: is a directory"),
        # what generate and import write must read back (trace/limits.py)
        (["generate", "mix", "-o", f, "--block-size", "2000000"], "--block-size must be in 1..1,048,576"),
        (["generate", "mix", "-o", f, "--concurrency", "2000000"], "--concurrency must be at most 1,000,000"),
        (["bench", "--workload", "mix", "--concurrency", "2000000"], "--concurrency must be at most 1,000,000"),
        # paths the OS refuses although permissions allow them
        (["generate", "mix", "-o", f"{d}/{'a' * 300}.jsonl"], "cannot be written"),
        (["bench", "--workload", "mix", "--json", f"{d}/{'a' * 300}.json"], "cannot be written"),
    ]
    for args, msg in cases:
        line = error_of(monkeypatch, capsys, *args)
        assert msg in line, (args, line)
    assert not list(tmp_path.iterdir())


def test_version_and_bare_command(monkeypatch, capsys):
    code, out, _ = run_main(monkeypatch, capsys, "--version")
    assert code == 0 and out.strip() == f"agentrt {agentrt.__version__}"
    code, out, _ = run_main(monkeypatch, capsys)
    assert code == 0 and "bench" in out and "generate" in out


@pytest.mark.parametrize("args,msg", [(["benchh"], "Did you mean 'bench'?"),
                                      (["bench", "--concurrency", "0"], "--concurrency must be > 0")])
def test_the_installed_entry_point(args, msg):
    p = subprocess.run([sys.executable, "-m", "agentrt.cli", *args], capture_output=True, text=True,
                       timeout=120)
    line = one_error_line(p.returncode, p.stderr)
    assert msg in line and p.stdout == ""


def test_version_from_the_entry_point():
    p = subprocess.run([sys.executable, "-m", "agentrt.cli", "--version"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == f"agentrt {agentrt.__version__}"


def test_a_trace_without_calls_is_an_error(monkeypatch, capsys, tmp_path):
    for text in ("", '{"trace": "workflow-trace/1", "block_size": 16}\n'):
        f = tmp_path / "t.jsonl"
        f.write_text(text)
        line = error_of(monkeypatch, capsys, "bench", "--trace", str(f), "--policies", "lru", "--quiet")
        assert "the trace has no calls" in line and str(f) in line


def test_flags_the_run_would_ignore_are_errors(monkeypatch, capsys, tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 64, "output_length": 1, "hash_ids": [1]}\n')
    (tmp_path / "logs").mkdir()
    cases = [
        (["bench", "--workload", "mix", "--router", "agent"], "--router needs --replicas 2 or more"),
        (["bench", "--workload", "mix", "--transfer-gbps", "25"], "--transfer-gbps needs --replicas 2 or more"),
        (["bench", "--workload", "mix", "--scale", "0.5"], "--scale: for --engine vllm only"),
        (["bench", "--workload", "mix", "--vllm-baseline", "stock"], "--vllm-baseline: for --engine vllm only"),
        (["bench", "--workload", "mix", "--vllm-blocks", "5", "--model-size", "small"],
         "--model-size, --vllm-blocks: for --engine vllm only"),
        (["bench", "--trace", str(trace), "--workflows", "5"], "with --trace they would be ignored"),
        (["bench", "--trace", str(trace), "--tool-scale", "4"], "with --trace they would be ignored"),
        (["import", "ag2", str(tmp_path / "logs"), "-o", str(tmp_path / "a.jsonl")], "no AG2 log (*.json) found"),
        (["generate", "team", "-o", str(tmp_path / "t.jsonl.bz2")], "written as .jsonl or .jsonl.gz, not .bz2"),
        (["bench", "--workload", "mix", "--policies", "lru", "--predictor-kind", "markov"],
         "--predictor-kind is for pbkv-he"),
        (["bench", "--workload", "mix", "--policies", "lru", "--predictor-kind", "rgcn", "--predictor-noise", "0.1"],
         "--predictor-kind and --predictor-noise are for"),
        (["bench", "--engine", "vllm", "--workload", "mix", "--policies", "pbkv-ta", "--predictor-noise", "0.2"],
         "--predictor-noise shapes the simulator's PBKV predictor"),
    ]
    for args, msg in cases:
        line = error_of(monkeypatch, capsys, *args)
        assert msg in line, (args, line)


def test_an_upper_case_gz_name_is_compressed_and_read_back(tmp_path):
    import gzip

    from agentrt.trace.reader import TraceReader
    from agentrt.trace.schema import TraceHeader
    from agentrt.trace.writer import write_trace
    from agentrt.workloads.base import GenConfig
    from agentrt.workloads.registry import get_workload
    wl, cfg = get_workload("team"), GenConfig(workflows=2)
    out = tmp_path / "T.JSONL.GZ"
    n = write_trace(out, wl.header(cfg), wl.generate(cfg))
    with gzip.open(out, "rt") as f:
        assert '"workflow-trace/1"' in f.readline()
    assert sum(1 for _ in TraceReader(out)) == n and isinstance(TraceReader(out).header, TraceHeader)

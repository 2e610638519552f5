"""The runs behind benchmarks/schedulers.py: `agentrt generate` and `agentrt bench` as
subprocesses on the prefill-heavy preset, and FCFS + LRU's sustainable rate.

Every bench holds back the first 25% of workflows for training (`--train-fraction 0.25`) unless
it names its own `--train`; commands are returned as shown in the docs (temporary paths cut)."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

PRESET = "qwen3-32b-h200"
SCHEDULERS = ["fcfs", "lpm", "las", "fair", "agent"]
EVICTION = ["lru", "pbkv-lae", "pbkv-ta"]
WORKFLOWS = {"coding": 100, "swebench": 150, "mix": 300}
GOODPUT_GRID = [0.5, 0.65, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5]


def cli(args: list[str]) -> None:
    subprocess.run([sys.executable, "-m", "agentrt.cli", *args], check=True, stdout=subprocess.DEVNULL)


def shown(args: list[str], tmp: Path) -> str:
    return "agentrt " + " ".join(shlex.quote(a) for a in args).replace(str(tmp) + "/", "")


def generate(workload: str, rate: float, workflows: int, tmp: Path) -> tuple[Path, str]:
    path = tmp / f"{workload}-{workflows}-r{rate:.6f}.jsonl"
    args = ["generate", workload, "--workflows", str(workflows), "--seed", "0", "--rate", f"{rate:.6f}",
            "-o", str(path)]
    if not path.exists():
        cli(args)
    return path, shown(args, tmp)


def bench(trace: Path, policies: list[str], scheduler: str, tmp: Path, extra: list[str] = ()) -> tuple[dict, str]:
    out = tmp / "out.json"
    split = [] if "--train" in extra else ["--train-fraction", "0.25"]
    args = ["bench", "--trace", str(trace), "--preset", PRESET, "--policies", ",".join(policies),
            "--scheduler", scheduler, *split, *extra, "--quiet", "--json", str(out)]
    cli(args)
    return json.loads(out.read_text()), shown(args[:-2], tmp)


def throughput(r: dict) -> float:
    return r["workflows"] / r["makespan_s"] if r["makespan_s"] > 0 else 0.0


def sustainable_rate(workload: str, workflows: int, tmp: Path, log) -> tuple[float, list]:
    """FCFS + LRU's highest measured workflow throughput over a grid of arrival rates."""
    probe = 1.0
    path, _ = generate(workload, probe, workflows, tmp)
    doc, _ = bench(path, ["lru"], "fcfs", tmp)
    mu0 = throughput(doc["results"]["lru"])
    points = [(probe, mu0)]
    for f in (0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0):
        rate = mu0 * f
        path, _ = generate(workload, rate, workflows, tmp)
        doc, _ = bench(path, ["lru"], "fcfs", tmp)
        points.append((rate, throughput(doc["results"]["lru"])))
        log(f"  {workload} capacity probe: offered {rate:.5f}/s -> {points[-1][1]:.5f}/s")
    return max(mu for _, mu in points), points

"""PBKV-TA's inferred conversation turns (option `turns`) on traces without workflow identity.

Where requests carry no workflow identity, PBKV-TA with `--set pbkv-ta.turns=true` ranks the
blocks of ended requests by the follow-up hazard of their inferred turn class
(`agentrt/policies/pbkv/turns.py`). Two parts:

    python -m benchmarks.turns shares     # per trace: requests per turn class (1, 2, 3+) and the
                                          # share a later request followed up (re-sent the prompt)
    python -m benchmarks.turns bench      # lru, pbkv-ta, pbkv-ta with turns, oracle (hit %)

`bench` runs both Mooncake traces (in ../shared/traces, read in place) at a third and an eighth
of their rate, and generated agent workloads with their identity stripped: each workflow's calls
keep their prompts (hash ids) and are placed in time by a fixed service model (prefill 20,000
tokens/s, decode 30 ms per output token, then the call's think time), workflows starting as a
Poisson process that keeps about 16 running; every line then has only timestamp, lengths and
hash ids, as a Mooncake trace (a framework that sends no identity: a tool-calling agent's
successive prompts, each re-sending its history). Those traces are written to a temporary
directory and replayed on a quarter and an eighth of an H100's KV memory.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

from agentrt.policies.pbkv.turns import CLASSES, TurnHazard
from agentrt.trace.reader import TraceReader

SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces" / "mooncake"
MOONCAKE = ("conversation_trace", "synthetic_trace")
WORKLOADS = ("swebench", "gaia", "mix", "coding")
PREFILL_TOKENS_PER_S = 20_000.0
DECODE_S_PER_TOKEN = 0.03


def shares(path: Path) -> tuple[list[int], list[float]]:
    th = TurnHazard()
    for c in TraceReader(path):
        th.arrived(c.tenant, list(c.hash_ids), (c.timestamp or 0.0) / 1000.0)
    t = th._tenants.get("default")
    counts = [int(x) for x in t.requests] if t is not None else [0] * CLASSES
    return counts, th.followed_share("default")


def anonymize(src: Path, dst: Path, running: int = 16, seed: int = 0) -> int:
    """Write `src` (a workflow trace) as identity-less Mooncake lines (see the module docstring);
    returns the number of calls."""
    rng = random.Random(seed)
    wfs: dict[str, list] = {}
    reader = TraceReader(src)
    for c in reader:
        wfs.setdefault(c.workflow, []).append(c)
    block_size = reader.header.block_size
    rel, spans = {}, []
    for w, calls in wfs.items():
        t, out = 0.0, []
        for c in calls:
            t += c.think_ms or 0.0
            out.append((t, c))
            t += 1000.0 * (c.input_length / PREFILL_TOKENS_PER_S + c.output_length * DECODE_S_PER_TOKEN)
        rel[w] = out
        spans.append(t)
    gap = sum(spans) / len(spans) / running
    lines, start = [], 0.0
    for w in wfs:
        start += rng.expovariate(1.0 / gap)
        lines += [(start + t, c) for t, c in rel[w]]
    lines.sort(key=lambda x: x[0])
    with dst.open("w") as f:
        f.write(json.dumps({"trace": "workflow-trace/1", "block_size": block_size}) + "\n")
        for t, c in lines:
            f.write(json.dumps({"timestamp": int(t), "input_length": c.input_length,
                                "output_length": c.output_length, "hash_ids": list(c.hash_ids)}) + "\n")
    return len(lines)


def run(args: list[str]) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        subprocess.run([sys.executable, "-m", "agentrt.cli", "bench", *args, "--quiet", "--json", out.name],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return json.loads(Path(out.name).read_text())


def row(label: str, args: list[str]) -> str:
    base = run([*args, "--policies", "lru,pbkv-ta,oracle"])
    turns = run([*args, "--policies", "pbkv-ta", "--set", "pbkv-ta.turns=true"])
    r = base["results"]
    lru, ta, on, orc = (100 * x["hit_rate"] for x in (r["lru"], r["pbkv-ta"], turns["results"]["pbkv-ta"],
                                                       r["oracle"]))
    o = base.get("overload")
    note = f" ({o['kind']})" if o else ""
    return f"| {label}{note} | {lru:.1f} | {ta:.1f} | {on:.1f} | {on - lru:+.1f} | {orc:.1f} |"


def bench() -> None:
    print("| trace | lru | pbkv-ta | pbkv-ta turns | turns - lru (pts) | oracle |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name in MOONCAKE:
        path = SHARED / f"{name}.jsonl"
        if not path.exists():
            print(f"| {name}: skipped, {path} not found | | | | | |")
            continue
        for scale in (3, 8):
            print(row(f"Mooncake {name}, x{scale}", ["--trace", str(path), "--time-scale", str(scale)]),
                  flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for w in WORKLOADS:
            src, dst = Path(tmp) / f"{w}.jsonl", Path(tmp) / f"{w}-anon.jsonl"
            subprocess.run([sys.executable, "-m", "agentrt.cli", "generate", w, "--workflows", "120",
                            "-o", str(src)], check=True, stdout=subprocess.DEVNULL)
            anonymize(src, dst)
            for blocks in (6430, 3215):
                print(row(f"{w} without identity, {blocks:,} blocks", ["--trace", str(dst), "--gpu-blocks",
                                                                       str(blocks)]), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.turns", description=__doc__.splitlines()[0])
    ap.add_argument("part", choices=("shares", "bench"))
    ap.add_argument("traces", nargs="*", type=Path, help="shares: traces to read (default: Mooncake's)")
    args = ap.parse_args()
    if args.part == "bench":
        bench()
        return
    paths = args.traces or [SHARED / f"{n}.jsonl" for n in MOONCAKE]
    print("| trace | turn 1: requests, followed | turn 2 | turn 3+ |")
    print("| --- | --- | --- | --- |")
    for p in paths:
        if not p.exists():
            print(f"(skipped: {p} not found)")
            continue
        counts, share = shares(p)
        print(f"| {p.name} | " + " | ".join(f"{n:,}, {s:.0%}" for n, s in zip(counts, share)) + " |")


if __name__ == "__main__":
    main()

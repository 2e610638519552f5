"""Do tenants that hold almost nothing dilute `fair`'s shares? Two tenants plus invented ones.

    python -m benchmarks.tenant_dilution                        # this checkout's rules
    PYTHONPATH=/path/to/old/src python -m benchmarks.tenant_dilution --label "before"
    python -m benchmarks.tenant_dilution --docs-only

The simulator's two-tenant experiment (`python -m benchmarks.schedulers --part tenants`: swebench on the
qwen3-32b-h200 preset, A at the rate stored in docs/results/schedulers.json, B at 5x, seeds 1, 3
and 5) run with `fair` as it is, then with `SYBILS` extra tenants added: each opens one workflow
early, sends a 64-token call, and keeps the workflow open for the whole run (its second call
comes after a think time longer than the trace), so each holds a few cached blocks and counts as
active throughout. Under a static split by weight each of them would be entitled to 1 / (SYBILS
+ 2) of the pool's running memory and KV cache, shrinking A's and B's; under max-min shares
(`sched/maxmin.py`, `sched/kvshare.py`) they keep what they hold and leave the rest. Reported: A's
hit rate and p90 TTFT, B's p90 TTFT and A's longest admission wait, with and without the
invented tenants. `--label` names a run (e.g. one with `PYTHONPATH` on an older checkout, whose
`agentrt bench` then runs the older rules); every label is kept in
docs/results/tenant_dilution.json and shown in docs/notes/results-details.md between the `tenant-dilution`
markers.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
from pathlib import Path

from benchmarks import sched_tenants as sched_bench
from benchmarks.router_setup import write_between

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "docs" / "results" / "tenant_dilution.json"
DOCS = REPO / "docs" / "notes" / "results-details.md"
START, END = "<!-- tenant-dilution:start -->", "<!-- tenant-dilution:end -->"
SYBILS = 20
SEEDS = (1, 3, 5)
POLICIES = ["lru"]


def with_sybils(trace: Path, n: int, tmp: Path, open_ms: float | None = None, tokens: int = 64) -> Path:
    """`trace` plus `n` tenants of one workflow each: a `tokens`-token call early, and a second
    `open_ms` later (default: after the whole trace, so the workflow stays open throughout)."""
    from agentrt.trace.reader import read_trace
    from agentrt.trace.writer import write_trace
    header, calls = read_trace(trace)
    calls = list(calls)
    end_ms = open_ms if open_ms is not None else max((c.timestamp or 0.0) for c in calls) + 10**7
    bs = header.block_size
    blocks = max(1, tokens // bs)
    extra = []
    for k in range(n):
        ids = [9 * 10**8 + 100 * k + j for j in range(blocks)]
        first = dataclasses.replace(calls[0], workflow=f"s{k}/w", call=0, agent="idle", tenant=f"s{k}",
                                    timestamp=1000.0 * k, after=(), think_ms=0.0, input_length=tokens,
                                    output_length=1, hash_ids=ids, output_hash_ids=[], last=None,
                                    signal=None, line=0)
        second = dataclasses.replace(first, call=1, timestamp=None, after=(0,), think_ms=end_ms,
                                     input_length=tokens + bs, hash_ids=ids + [ids[-1] + 50])
        extra += [first, second]
    flows: dict[str, list] = {}
    for c in extra + calls:
        flows.setdefault(c.workflow, []).append(c)
    # workflows in the order they arrive, each one's calls in the order they are issued
    merged = [c for fl in sorted(flows.values(), key=lambda fl: fl[0].timestamp or 0.0) for c in fl]
    path = tmp / f"{trace.stem}-sybils{n}.jsonl"
    write_trace(path, header, merged)
    return path


def run(label: str, tmp: Path) -> dict:
    stored = json.loads((REPO / "docs" / "results" / "schedulers.json").read_text())["tenants"]
    rate_a, ratio, n_a = stored["rate_a"], stored["ratio"], stored["workflows_a"]
    train = sched_bench.two_tenant_trace("swebench", rate_a, n_a, ratio, tmp, True, sched_bench.TRAIN_SEED)
    rows: dict = {}
    for seed in SEEDS:
        base = sched_bench.two_tenant_trace("swebench", rate_a, n_a, ratio, tmp, True, seed)
        for name, trace in (("A and B", base), (f"A, B and {SYBILS} idle tenants", with_sybils(base, SYBILS, tmp))):
            doc, cmd = sched_bench.bench(trace, POLICIES, "fair", tmp, ["--train", str(train)])
            rows.setdefault(name, {})[str(seed)] = {
                "command": cmd, "a": sched_bench.tenant_stats(doc, POLICIES[0], "a"),
                "b": sched_bench.tenant_stats(doc, POLICIES[0], "b")}
            a = rows[name][str(seed)]["a"]
            print(f"  [{label}] seed {seed} {name}: A {100 * a['hit_rate']:.1f}% p90 {a['ttft_p90_s']:.2f}s "
                  f"wait max {a['wait_max_s']:.1f}s", flush=True)
    return {"rate_a": rate_a, "ratio": ratio, "workflows_a": n_a, "rows": rows}


def render(doc: dict) -> str:
    lines = [f"Built by `python -m benchmarks.tenant_dilution` (swebench, qwen3-32b-h200, `fair` + LRU; A at "
             f"{next(iter(doc.values()))['rate_a']:.5f} workflows/s, B at 5x; {SYBILS} invented tenants each "
             f"holding one open workflow with a 64-token call; median (min-max) over seeds "
             f"{', '.join(map(str, SEEDS))}).\n",
             "| rules | run | A's hit % | A's p90 TTFT s | A's longest wait s | B's hit % | B's p90 TTFT s |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for label, d in doc.items():
        for name, seeds in d["rows"].items():
            rs = list(seeds.values())
            lines.append(
                f"| {label} | {name} | {sched_bench.spread([100 * r['a']['hit_rate'] for r in rs], '{:.1f}')} | "
                f"{sched_bench.spread([r['a']['ttft_p90_s'] for r in rs], '{:.2f}')} | "
                f"{sched_bench.spread([r['a']['wait_max_s'] for r in rs], '{:.1f}')} | "
                f"{sched_bench.spread([100 * r['b']['hit_rate'] for r in rs], '{:.1f}')} | "
                f"{sched_bench.spread([r['b']['ttft_p90_s'] for r in rs], '{:.2f}')} |")
    first = next(iter(doc.values()))["rows"]
    cmds = [seeds[str(SEEDS[0])]["command"] for seeds in first.values()]
    lines.append("\nCommands for seed " + str(SEEDS[0]) + ": " + "; ".join(f"`{c}`" for c in cmds)
                 + " (the traces are built by `two_tenant_trace` in benchmarks/sched_tenants.py and "
                 "`with_sybils` in benchmarks/tenant_dilution.py).")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.tenant_dilution", description=__doc__.split("\n")[0])
    ap.add_argument("--label", default="max-min shares (this checkout)")
    ap.add_argument("--docs-only", action="store_true")
    a = ap.parse_args()
    if not a.docs_only:
        with tempfile.TemporaryDirectory(prefix="agentrt-dilution-") as tmp:
            result = run(a.label, Path(tmp))
        doc = json.loads(OUT.read_text()) if OUT.exists() else {}    # read late: other labels may have landed
        doc[a.label] = result
        OUT.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {OUT}")
    doc = json.loads(OUT.read_text()) if OUT.exists() else {}
    if doc:
        write_between(DOCS, START, END, render(doc))


if __name__ == "__main__":
    main()

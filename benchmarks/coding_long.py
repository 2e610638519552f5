"""Long coding-agent sessions (issue 41): every policy against LRU and the oracle, without and with
the runtime's LRU safety net, over block sizes and memory; and two drawn applications with long
contexts.

    python -m benchmarks.coding_long               # the sweep and the drawn applications
    python -m benchmarks.coding_long --why         # and the per-call-kind / decision tables
    python -m benchmarks.coding_long --docs-only   # re-render docs from docs/results/coding_long.json

The coding configuration is the long end of `agentrt generate coding` (its options: a 14k-token
system prompt, compaction when a session passes 120k tokens, requests needing three times the
default turns, half the sessions delegating to explore subagents): 48 sessions, 12 at once,
seed 0, mean prompt about 57k tokens. Memory follows the regime sweep's one rule: f x concurrency
x mean prompt blocks, f in {2/3, 1, 4/3}; f = 2/3 is memory for eight sessions' contexts, the
issue's; block sizes 16 and 32 at f = 1 (the trace regenerated for each). Each point is one
`agentrt bench --trace ... --gpu-blocks B --policies lru,AGENTRT...,oracle` (the safety net on,
as by default) and one `--no-safety-net` run of the agentrt policies. Without a host tier `pbkv`
and `pbkv-aggressive` rank as `pbkv-he` (their prefetch needs one), so they are not run apart.
The drawn applications: the first two seeds after benchmarks/generalise.py's 24 whose drawn
context limit is at least 50,000 tokens (`agentrt generate random --seed S`, 80 workflows, 8 at
once, 16-token blocks, f in {0.5, 1} as there).
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.results import DOCS, sweep_flags, write

AGENTRT = ["cachesage", "kvflow", "ttl", "pbkv-lae", "pbkv-he", "pbkv-ta"]
CODING = ["--workflows", "48", "--concurrency", "12", "--seed", "0", "--set", "system_tokens=14000",
          "--set", "compact_min=120000", "--set", "compact_max=120000", "--set", "turns_scale=3",
          "--set", "max_turns=300", "--set", "explore_sessions=0.5"]
POINTS = [(64, 2 / 3), (64, 1.0), (64, 4 / 3), (32, 1.0), (16, 1.0)]
WHY = [(64, 4 / 3), (16, 1.0)]        # the points the per-call-kind and decision tables are for
APPS = [25, 27]
OUT = DOCS / "results" / "coding_long.json"


def cli(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "agentrt.cli", *args], check=True, stdout=subprocess.DEVNULL)


def trace(name: str, gen: list[str], tmp: Path) -> tuple[Path, float, int]:
    """Generate once; (path, mean prompt tokens, block size)."""
    from agentrt.trace.reader import TraceReader
    path = tmp / f"{name}.jsonl"
    if not path.exists():
        cli("generate", *gen, "-o", str(path))
    reader = TraceReader(path)
    n = total = 0
    for c in reader:
        n += 1
        total += c.input_length
    return path, total / max(1, n), reader.header.block_size


def bench(path: Path, blocks: int, policies: list[str], net: bool, tmp: Path) -> dict:
    out = tmp / f"{path.stem}-{blocks}-{'net' if net else 'nonet'}.json"
    args = ["bench", "--trace", str(path), "--gpu-blocks", str(blocks), "--policies", ",".join(policies),
            "--quiet", "--json", str(out)] + ([] if net else ["--no-safety-net"])
    cli(*args)
    doc = json.loads(out.read_text())
    keep = ("hit_rate", "ttft_mean_s", "ttft_p90_s", "e2e_mean_s", "safety_net")
    return {p: {k: r.get(k) for k in keep} for p, r in doc["results"].items()}


def point(label: str, gen: list[str], bs: int, f: float, conc: int, tmp: Path) -> dict:
    path, mean, _ = trace(label, gen + ["--block-size", str(bs)], tmp)
    blocks = max(64, int(math.ceil(f * conc * mean / bs)))
    on = bench(path, blocks, ["lru", *AGENTRT, "oracle"], True, tmp)
    off = bench(path, blocks, AGENTRT, False, tmp)
    cmd = f"agentrt bench --trace {label}.jsonl --gpu-blocks {blocks} --policies lru,{','.join(AGENTRT)},oracle"
    return {"label": label, "block_size": bs, "f": f, "gpu_blocks": blocks, "mean_prompt": mean,
            "generate": "agentrt generate " + " ".join(shlex.quote(g) for g in gen + ["--block-size", str(bs)])
            + f" -o {label}.jsonl", "command": cmd, "on": on, "off": off}


def run_all(tmp: Path, why: bool, done: list[dict]) -> dict:
    """Every point, saving the JSON after each (a long sweep survives an interruption); the rows
    of `done` (a `--resume`d file) are kept and not run again."""
    rows = list(done)
    todo = [(f"coding-b{bs}", ["coding", *CODING], bs, f, 12) for bs, f in POINTS]
    todo += [(f"random-{seed}", ["random", "--workflows", "80", "--seed", str(seed), "--concurrency", "8"],
              16, f, 8) for seed in APPS for f in (0.5, 1.0)]
    for i, (label, gen, bs, f, conc) in enumerate(todo, 1):
        if any(r["label"] == label and r["f"] == f for r in rows):
            continue
        print(f"[{i}/{len(todo)}] {label} f {f:.2f}", flush=True)
        rows.append(point(label, gen, bs, f, conc, tmp))
        print(line(rows[-1]), flush=True)
        OUT.write_text(json.dumps({"rows": rows, "partial": True}, indent=1))
    doc = {"rows": rows}
    if why:
        from benchmarks.lru_regret import analyse
        doc["why"] = []
        for bs, f in WHY:
            row = next((r for r in rows if r["block_size"] == bs and r["f"] == f
                        and r["label"].startswith("coding")), None)
            if row is None:
                continue
            pols = ["cachesage", "pbkv-lae", "pbkv-he", "pbkv-ta"]
            path = tmp / f"{row['label']}.jsonl"
            if not path.exists():        # a resumed row: regenerate its trace
                cli(*shlex.split(row["generate"])[1:-2], "-o", str(path))
            res = analyse(path, row["gpu_blocks"], pols)
            doc["why"].append({"label": row["label"], "block_size": bs, "f": f,
                               "gpu_blocks": row["gpu_blocks"], "policies": pols, "result": res})
    return doc


def line(row: dict) -> str:
    on, off = row["on"], row["off"]
    lru = 100 * on["lru"]["hit_rate"]
    cells = " ".join(f"{p} {100 * off[p]['hit_rate']:.1f}->{100 * on[p]['hit_rate']:.1f}" for p in AGENTRT)
    return (f"{row['label']} f{row['f']:.2f} {row['gpu_blocks']:,} blocks: lru {lru:.1f} "
            f"oracle {100 * on['oracle']['hit_rate']:.1f} | {cells}")


def share(r: dict) -> float:
    net = r.get("safety_net") or {}
    return net.get("fallback_share", 0.0)


def tables(doc: dict) -> str:
    head = ("| trace | f | GPU blocks | lru | oracle | " + " | ".join(AGENTRT) + " |\n"
            "| --- | ---: | ---: | ---: | ---: | " + " | ".join("---:" for _ in AGENTRT) + " |")
    hit, ttft = [head], [head]
    worst_hit = worst_ttft = (0.0, "")
    ta_oracle = []
    for row in doc["rows"]:
        on, off = row["on"], row["off"]
        lru_h, lru_t = on["lru"]["hit_rate"], on["lru"]["ttft_mean_s"]
        pre = f"| {row['label']} | {row['f']:.2f} | {row['gpu_blocks']:,} | "
        hit.append(pre + f"{100 * lru_h:.1f} | {100 * on['oracle']['hit_rate']:.1f} | " + " | ".join(
            f"{100 * off[p]['hit_rate']:.1f} / {100 * on[p]['hit_rate']:.1f}"
            + (f" ({100 * share(on[p]):.0f}%)" if share(on[p]) >= 0.005 else "") for p in AGENTRT) + " |")
        ttft.append(pre + f"{lru_t:.3f} | {on['oracle']['ttft_mean_s']:.3f} | " + " | ".join(
            f"{off[p]['ttft_mean_s']:.3f} / {on[p]['ttft_mean_s']:.3f}" for p in AGENTRT) + " |")
        for p in AGENTRT:
            gap = 100 * (lru_h - on[p]["hit_rate"])
            slow = on[p]["ttft_mean_s"] / lru_t - 1 if lru_t else 0.0
            if gap > worst_hit[0]:
                worst_hit = (gap, f"{p} on {row['label']} f {row['f']:.2f}")
            if slow > worst_ttft[0]:
                worst_ttft = (slow, f"{p} on {row['label']} f {row['f']:.2f}")
        if row["label"].startswith("coding"):
            ta_oracle.append(on["pbkv-ta"]["hit_rate"] / on["oracle"]["hit_rate"])
    summary = (f"\nWith the net on, the largest shortfall against LRU is {worst_hit[0]:.1f} points of hit rate "
               f"({worst_hit[1] or 'none'}) and {100 * worst_ttft[0]:.1f}% of mean TTFT "
               f"({worst_ttft[1] or 'none'}); pbkv-ta is at {min(ta_oracle):.2f}-{max(ta_oracle):.2f}x the "
               "oracle on the coding points.\n")
    return ("GPU hit %, each cell without / with the safety net (in brackets: the share of the run's "
            "time the net spent in LRU order, where at least 0.5%):\n\n" + "\n".join(hit)
            + "\n\nMean TTFT (s), without / with the safety net:\n\n" + "\n".join(ttft) + "\n" + summary)


def why_tables(doc: dict) -> str:
    from benchmarks.lru_regret import render
    out = []
    for w in doc.get("why", []):
        out.append(f"\n`python -m benchmarks.lru_regret --trace {w['label']}.jsonl --gpu-blocks {w['gpu_blocks']} "
                   f"--policies {','.join(w['policies'])}` (f = {w['f']:.2f}, {w['block_size']}-token blocks):\n\n"
                   + render(w["result"], w["policies"]))
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.coding_long", description=__doc__.splitlines()[0])
    ap.add_argument("--why", action="store_true", help="also the per-call-kind and decision tables")
    ap.add_argument("--resume", action="store_true",
                    help=f"keep the points already in {OUT.relative_to(DOCS.parent)} and run the rest")
    sweep_flags(ap, json_name=str(OUT.relative_to(DOCS.parent)), jobs=False)
    a = ap.parse_args()
    if a.docs_only:
        if not OUT.exists():
            ap.error(f"--docs-only: {OUT.relative_to(DOCS.parent)} does not exist (run the sweep first)")
        doc = json.loads(OUT.read_text())
    else:
        with tempfile.TemporaryDirectory(prefix="agentrt-coding-long-") as d:
            done = json.loads(OUT.read_text())["rows"] if a.resume and OUT.exists() else []
            doc = run_all(Path(d), a.why, done)
        OUT.write_text(json.dumps(doc, indent=1))
    if a.no_docs:
        return
    rows = doc["rows"]
    gens = sorted({r["generate"] for r in rows})
    write("coding-long", "Built by `python -m benchmarks.coding_long" + (" --why" if doc.get("why") else "")
          + "` (docs/results/coding_long.json has every command). Traces:\n\n"
          + "\n".join(f"    {g}" for g in gens) + "\n\nand each point's run `agentrt bench --trace TRACE "
          f"--gpu-blocks B --policies lru,{','.join(AGENTRT)},oracle`, then the agentrt policies again "
          "with `--no-safety-net`.\n\n"
          + (f"Partial: {len(rows)} points of the sweep so far (`--resume` runs the rest).\n\n"
             if doc.get("partial") else "") + tables(doc) + why_tables(doc))


if __name__ == "__main__":
    main()

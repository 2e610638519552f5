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
issue's; block sizes 32 and 16 at f = 1 (the trace regenerated for each). Each memory size is one `agentrt bench
--trace ... --gpu-blocks B --policies lru,AGENTRT...,oracle` (the safety net on, as by default). Without a host tier `pbkv`
and `pbkv-aggressive` rank as `pbkv-he` (their prefetch needs one), so they are not run apart.
The drawn applications: the first two seeds after benchmarks/generalise.py's 24 whose drawn
context limit is at least 50,000 tokens (`agentrt generate random --seed S`, 80 workflows, 8 at
once, 16-token blocks, f in {0.5, 1} as there).

Why each point is a spread of runs: these replays are closed loops of a dozen sessions whose
calls each hit almost all or almost nothing of a context of ~900 blocks, so one miss more or
less reorders every later call. LRU's own hit rate moves 52.6 / 54.3 / 53.3 / 52.8 / 57.4% at
7,000 / 7,050 / 7,094 / 7,150 / 7,200 blocks of the 64-token trace (f = 2/3), far more than the
0.5 points the issue compares. So each point runs at `--spread` memory sizes, 1% apart around
it (default 5: -2%..+2%), and a policy's figure is the median over them of its difference to
LRU at the same size (paired), with the range. The `--no-safety-net` run is made only for the
policies whose net fell back at that size (elsewhere the net never changed their order, and
the two runs are the same run).
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import subprocess
import sys
import statistics
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmarks.results import DOCS, sweep_flags, write

AGENTRT = ["cachesage", "kvflow", "ttl", "pbkv-lae", "pbkv-he", "pbkv-ta"]
BASELINES = ("kvflow", "ttl")      # the others' published policies, beside agentrt's own
CODING = ["--workflows", "48", "--concurrency", "12", "--seed", "0", "--set", "system_tokens=14000",
          "--set", "compact_min=120000", "--set", "compact_max=120000", "--set", "turns_scale=3",
          "--set", "max_turns=300", "--set", "explore_sessions=0.5"]
POINTS = [(64, 2 / 3), (64, 1.0), (64, 4 / 3), (32, 1.0), (16, 1.0)]
WHY = [(64, 2 / 3), (64, 4 / 3)]        # the points the per-call-kind and decision tables are for
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


def fell_back(r: dict) -> bool:
    return bool((r.get("safety_net") or {}).get("fallbacks"))


def one_size(path: Path, blocks: int, tmp: Path) -> dict:
    """Every policy with the net (as by default), then without it where it fell back."""
    on = bench(path, blocks, ["lru", *AGENTRT, "oracle"], True, tmp)
    again = [p for p in AGENTRT if fell_back(on[p])]
    off = {p: on[p] for p in AGENTRT} | (bench(path, blocks, again, False, tmp) if again else {})
    return {"gpu_blocks": blocks, "on": on, "off": off}


def sizes(base: int, spread: int) -> list[int]:
    return [max(64, round(base * (1 + 0.01 * (i - spread // 2)))) for i in range(spread)]


def point(label: str, gen: list[str], bs: int, f: float, conc: int, tmp: Path, spread: int,
          pool: ThreadPoolExecutor) -> dict:
    path, mean, _ = trace(label, gen + ["--block-size", str(bs)], tmp)
    blocks = max(64, int(math.ceil(f * conc * mean / bs)))
    runs = list(pool.map(lambda b: one_size(path, b, tmp), sizes(blocks, spread)))
    cmd = f"agentrt bench --trace {label}.jsonl --gpu-blocks B --policies lru,{','.join(AGENTRT)},oracle"
    return {"label": label, "block_size": bs, "f": f, "gpu_blocks": blocks, "mean_prompt": mean,
            "generate": "agentrt generate " + " ".join(shlex.quote(g) for g in gen + ["--block-size", str(bs)])
            + f" -o {label}.jsonl", "command": cmd, "runs": runs}


def run_all(tmp: Path, why: bool, done: list[dict], spread: int, jobs: int) -> dict:
    """Every point, saving the JSON after each (a long sweep survives an interruption); the rows
    of `done` (a `--resume`d file) are kept and not run again."""
    rows = list(done)
    todo = [(f"coding-b{bs}", ["coding", *CODING], bs, f, 12) for bs, f in POINTS]
    todo += [(f"random-{seed}", ["random", "--workflows", "80", "--seed", str(seed), "--concurrency", "8"],
              16, f, 8) for seed in APPS for f in (0.5, 1.0)]
    with ThreadPoolExecutor(jobs) as pool:
        for i, (label, gen, bs, f, conc) in enumerate(todo, 1):
            if any(r["label"] == label and r["f"] == f for r in rows):
                continue
            print(f"[{i}/{len(todo)}] {label} f {f:.2f}", flush=True)
            rows.append(point(label, gen, bs, f, conc, tmp, spread, pool))
            print(line(rows[-1]), flush=True)
            OUT.write_text(json.dumps({"rows": rows, "partial": True}, indent=1))
    order = [(label, f) for label, _, _, f, _ in todo]
    rows.sort(key=lambda r: order.index((r["label"], r["f"])) if (r["label"], r["f"]) in order else len(order))
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


def diffs(row: dict, p: str, side: str = "on") -> list[float]:
    """Points of hit rate over LRU at the same memory size, one per run of the spread."""
    return [100 * (r[side][p]["hit_rate"] - r["on"]["lru"]["hit_rate"]) for r in row["runs"]]


def ratios(row: dict, p: str, key: str, side: str = "on", base: str = "lru") -> list[float]:
    out = []
    for r in row["runs"]:
        b = r["on"][base][key]
        out.append(r[side][p][key] / b if b else 1.0)
    return out


def hits(row: dict, p: str) -> list[float]:
    return [100 * r["on"][p]["hit_rate"] for r in row["runs"]]


def spread_cell(xs: list[float], fmt: str = "{:+.1f}") -> str:
    return (fmt.format(statistics.median(xs)) + " (" + fmt.format(min(xs)) + ".." + fmt.format(max(xs))
            + ")") if len(xs) > 1 else fmt.format(xs[0])


def line(row: dict) -> str:
    cells = " ".join(f"{p} {statistics.median(diffs(row, p, 'off')):+.1f}/{statistics.median(diffs(row, p)):+.1f}"
                     for p in AGENTRT)
    return (f"{row['label']} f{row['f']:.2f} {row['gpu_blocks']:,} blocks: lru "
            f"{spread_cell(hits(row, 'lru'), '{:.1f}')} oracle {statistics.median(hits(row, 'oracle')):.1f} | "
            f"median points over lru, net off/on: {cells}")


def fallbacks(row: dict, p: str) -> int:
    return sum(fell_back(r["on"][p]) for r in row["runs"])


def tables(doc: dict) -> str:
    head = ("| trace | f | GPU blocks | lru | oracle | " + " | ".join(AGENTRT) + " |\n"
            "| --- | ---: | ---: | ---: | ---: | " + " | ".join("---:" for _ in AGENTRT) + " |")
    hit, ttft = [head], [head]
    worst = {(own, what): (0.0, "") for own in (True, False) for what in ("hit", "ttft")}
    ta_oracle = []
    for row in doc["rows"]:
        n = len(row["runs"])
        pre = f"| {row['label']} | {row['f']:.2f} | {row['gpu_blocks']:,} | "
        hit.append(pre + f"{spread_cell(hits(row, 'lru'), '{:.1f}')} | {spread_cell(diffs(row, 'oracle'))} | "
                   + " | ".join(spread_cell(diffs(row, p))
                                + (f" [net off: {statistics.median(diffs(row, p, 'off')):+.1f}; fell back in "
                                   f"{fallbacks(row, p)} of {n}]" if fallbacks(row, p) else "")
                                for p in AGENTRT) + " |")
        ttft.append(pre + f"{spread_cell([r['on']['lru']['ttft_mean_s'] for r in row['runs']], '{:.2f}')} | "
                    + f"{spread_cell(ratios(row, 'oracle', 'ttft_mean_s'), '{:.2f}')} | "
                    + " | ".join(spread_cell(ratios(row, p, "ttft_mean_s"), "{:.2f}") for p in AGENTRT) + " |")
        for p in AGENTRT:
            where = f"{p} on {row['label']} f {row['f']:.2f}"
            for what, x in (("hit", -statistics.median(diffs(row, p))),
                            ("ttft", statistics.median(ratios(row, p, "ttft_mean_s")) - 1)):
                key = (p not in BASELINES, what)
                if x > worst[key][0]:
                    worst[key] = (x, where)
        if row["label"].startswith("coding"):
            ta_oracle.append(statistics.median(ratios(row, "pbkv-ta", "hit_rate", base="oracle")))
    runs = {len(r["runs"]) for r in doc["rows"]}
    def said(own: bool) -> str:
        (h, hw), (t, tw) = worst[(own, "hit")], worst[(own, "ttft")]
        return (f"{h:.1f} points of hit rate ({hw or 'none'}) and {100 * t:.1f}% of mean TTFT "
                f"({tw or 'none'})")
    summary = (f"\nWith the net on, the largest median shortfall against LRU of agentrt's own policies "
               f"(cachesage and the PBKV family) is {said(True)}; of the baselines ({', '.join(BASELINES)}), "
               f"{said(False)}"
               + (f"; pbkv-ta's median is {min(ta_oracle):.2f}-{max(ta_oracle):.2f}x the oracle's hit rate on the "
                  "coding points" if ta_oracle else "") + ".\n")
    return (f"Each point runs at {'/'.join(str(n) for n in sorted(runs))} memory sizes 1% apart around its GPU "
            "blocks (the docstring says why). Hit rate: LRU's median (range) in %, then each policy's median "
            "difference to LRU at the same size, in points (range); where the net fell back, the median "
            "without it and at how many sizes it fell back:\n\n" + "\n".join(hit)
            + "\n\nMean TTFT: LRU's median (range) in s, then each policy's median ratio to LRU's at the "
            "same size (range), net on:\n\n" + "\n".join(ttft) + "\n" + summary)


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
    ap.add_argument("--spread", type=int, default=5, help="memory sizes 1%% apart per point (odd)")
    sweep_flags(ap, json_name=str(OUT.relative_to(DOCS.parent)), jobs=True)
    a = ap.parse_args()
    if a.spread < 1 or a.spread % 2 == 0 or a.jobs < 1:
        ap.error("--spread must be odd and >= 1, --jobs >= 1")
    if a.docs_only:
        if not OUT.exists():
            ap.error(f"--docs-only: {OUT.relative_to(DOCS.parent)} does not exist (run the sweep first)")
        doc = json.loads(OUT.read_text())
    else:
        with tempfile.TemporaryDirectory(prefix="agentrt-coding-long-") as d:
            done = json.loads(OUT.read_text())["rows"] if a.resume and OUT.exists() else []
            doc = run_all(Path(d), a.why, done, a.spread, a.jobs)
        OUT.write_text(json.dumps(doc, indent=1))
    if a.no_docs:
        return
    rows = doc["rows"]
    gens = sorted({r["generate"] for r in rows})
    write("coding-long", "Built by `python -m benchmarks.coding_long" + (" --why" if doc.get("why") else "")
          + "` (docs/results/coding_long.json has every command). Traces:\n\n"
          + "\n".join(f"    {g}" for g in gens) + "\n\nand each point's run `agentrt bench --trace TRACE "
          f"--gpu-blocks B --policies lru,{','.join(AGENTRT)},oracle`, then the policies whose net fell "
          "back again with `--no-safety-net`.\n\n"
          + (f"Partial: {len(rows)} points of the sweep so far (`--resume` runs the rest).\n\n"
             if doc.get("partial") else "") + tables(doc) + why_tables(doc))


if __name__ == "__main__":
    main()

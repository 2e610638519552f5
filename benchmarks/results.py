"""Regenerate the simulator tables and plots of docs/notes/results-details.md.

Every table is one `agentrt bench` run; this script runs them through the same code path and
writes, between the markers in docs/notes/results-details.md, each table under the exact command that
reproduces it. The JSON of every run goes to docs/results/ and the plots to docs/figures/.

    python -m benchmarks.results                 # everything (about 20-40 minutes on 2 cores)
    python -m benchmarks.results --only tables   # or --only real (Mooncake and AG2 traces)

Settings (the same for every workload, never tuned to one): Llama-3.1-8B on H100 (`--preset
llama3.1-8b-h100`), 16-token blocks, 200 workflows at 16 concurrent, seed 0. Two memory
pressures: the preset's full KV memory (25,720 blocks) and a quarter of it (6,430 blocks).
The host-tier table adds a host pool of twice the GPU pool.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

from agentrt.bench.overload import overload_text
from agentrt.bench.report import bound_label

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
SHARED = REPO.parent / "shared" / "traces"
WORKLOADS = ["hover", "swebench", "financebench", "mmlu", "mtbench", "gaia", "gsm8k", "humaneval", "mix"]
FULL, QUARTER = 25720, 6430
GPU_POLICIES = "lru,cachesage,kvflow,ttl,pbkv-lae,pbkv-he,pbkv-ta,oracle,belady-held,belady,infinite"
HOST_POLICIES = "lru,cachesage,kvflow,pbkv-lae,pbkv-he,pbkv,pbkv-aggressive,pbkv-ta,oracle,belady-held,belady,infinite"
MARK = "<!-- results:{part}:{edge} -->"
# stated on every command, so the tables do not depend on the CLI defaults of the day
LOAD = ["--workflows", "200", "--concurrency", "16", "--seed", "0"]


def bench(args: list[str], name: str) -> dict:
    out = DOCS / "results" / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = ["agentrt", "bench", *args, "--quiet", "--json", str(out.relative_to(REPO))]
    t0 = time.time()
    subprocess.run([sys.executable, "-m", "agentrt.cli", *cmd[1:]], cwd=REPO, check=True,
                   stdout=subprocess.DEVNULL)
    doc = json.loads(out.read_text())
    doc["_command"] = " ".join(shlex.quote(c) for c in cmd)
    doc["_seconds"] = time.time() - t0
    print(f"{name}: {doc['_seconds']:.0f} s", flush=True)
    return doc


def pct(x):
    return "-" if x is None else f"{100 * x:.1f}"


def sec(x):
    return "-" if x is None else f"{x:.3f}"


def table(doc: dict) -> str:
    res = doc["results"]
    lru = res.get("lru") or doc.get("lru_reference") or {}
    rows = ["| policy | GPU hit % | host hit % | prefill tokens | TTFT mean s | TTFT p99 s | "
            "E2E mean s | E2E p99 s | tok/s | hit vs LRU | TTFT vs LRU |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, r in res.items():
        hit_x = (f"{r['hit_rate'] / lru['hit_rate']:.2f}x" if lru.get("hit_rate") else "-")
        ttft_x = (f"{lru['ttft_mean_s'] / r['ttft_mean_s']:.2f}x"
                  if r.get("ttft_mean_s") and lru.get("ttft_mean_s") else "-")
        tput = "-" if r["throughput_tok_s"] is None else f"{r['throughput_tok_s']:,.0f}"
        rows.append(f"| {name}{bound_label(name, r, doc)} | {pct(r['hit_rate'])} | "
                    f"{pct(r['host_hit_rate'])} | {r['prefill_tokens']:,} | {sec(r['ttft_mean_s'])} | "
                    f"{sec(r['ttft_p99_s'])} | {sec(r['e2e_mean_s'])} | {sec(r['e2e_p99_s'])} | {tput} | "
                    f"{hit_x} | {ttft_x} |")
    split = doc["config"].get("train")
    note = f"\nTraining split: {split['source']}; every policy is scored on the rest.\n" if split else "\n"
    return (f"`{doc['_command']}`\n\n{doc['calls']:,} calls, {doc['workflows']:,} workflows scored.{note}\n"
            + "\n".join(rows) + "\n")


def tables() -> str:
    parts = ["### Every workload at two memory pressures (GPU tier only)\n"]
    for w in WORKLOADS:
        for label, blocks in (("full H100 KV memory", FULL), ("a quarter of it", QUARTER)):
            doc = bench(["--workload", w, *LOAD, "--gpu-blocks", str(blocks), "--policies", GPU_POLICIES],
                        f"{w}-gpu{blocks}")
            parts.append(f"#### {w}, {blocks:,} GPU blocks ({label})\n\n{table(doc)}")
    parts.append("### With a host tier (twice the GPU pool): prefetch variants\n")
    for w in WORKLOADS:
        doc = bench(["--workload", w, *LOAD, "--gpu-blocks", str(QUARTER), "--host-blocks", str(2 * QUARTER),
                     "--policies", HOST_POLICIES], f"{w}-host")
        parts.append(f"#### {w}, {QUARTER:,} GPU + {2 * QUARTER:,} host blocks\n\n{table(doc)}")
    return "\n".join(parts)


def real_traces() -> str:
    parts = ["### Real traces\n"]
    pol = "lru,cachesage,kvflow,ttl,pbkv-lae,pbkv-he,pbkv-ta,oracle,belady-held,belady,infinite"
    for name in ("conversation_trace", "synthetic_trace"):
        path = SHARED / "mooncake" / f"{name}.jsonl"
        if not path.exists():
            parts.append(f"(skipped: {path} not found)\n")
            continue
        rel = f"../shared/traces/mooncake/{name}.jsonl"
        # a third of each trace's rate is still saturated in bursts (the bench's note says so),
        # an eighth is not: both loads, each trace
        for stretch, label, suffix in ((3, "a third", ""), (8, "an eighth", "-x8")):
            doc = bench(["--trace", rel, "--time-scale", str(stretch), "--policies", pol],
                        f"mooncake-{name}{suffix}")
            parts.append(f"#### Mooncake {name} (no agent identity), open loop at {label} of its rate\n\n{table(doc)}")
            if doc.get("overload"):
                parts.append(f"`agentrt bench` notes under this table: {overload_text(doc['overload'])}\n")
    ag2 = DOCS / "results" / "ag2.jsonl"
    if (SHARED / "ag2-captainagent").exists():
        subprocess.run([sys.executable, "-m", "agentrt.cli", "import", "ag2",
                        str(SHARED / "ag2-captainagent"), "-o", str(ag2)], check=True,
                       stdout=subprocess.DEVNULL)
        for blocks in (5227, 2613):
            doc = bench(["--trace", str(ag2.relative_to(REPO)), "--gpu-blocks", str(blocks),
                         "--concurrency", "16", "--policies", pol], f"ag2-gpu{blocks}")
            parts.append(f"#### AG2 CaptainAgent logs (imported), {blocks:,} GPU blocks, 16 chats at once\n\n"
                         f"`agentrt import ag2 ../shared/traces/ag2-captainagent -o docs/results/ag2.jsonl`\n\n{table(doc)}")
    return "\n".join(parts)


def summary() -> str:
    """One line per workload and pressure from the JSON the table runs wrote (no new runs)."""
    pols = ["lru", "cachesage", "kvflow", "ttl", "pbkv-lae", "pbkv-he", "pbkv-ta", "oracle", "belady-held", "belady", "infinite"]
    rows = ["| workload | GPU blocks | " + " | ".join(pols)
            + " | best / LRU hit | best / belady-held hit | best / LRU TTFT | best / LRU E2E |",
            "| --- | ---: | " + " | ".join("---:" for _ in pols) + " | ---: | ---: | ---: | ---: |"]
    for w in WORKLOADS:
        for blocks in (FULL, QUARTER):
            f = DOCS / "results" / f"{w}-gpu{blocks}.json"
            if not f.exists():
                continue
            r = json.loads(f.read_text())["results"]
            real = [p for p in pols if p in r and not r[p].get("bound") and p != "lru"]
            best = max(real, key=lambda p: r[p]["hit_rate"])
            lru = r["lru"]
            cells = [pct(r[p]["hit_rate"]) if p in r else "-" for p in pols]
            rows.append(f"| {w} | {blocks:,} | " + " | ".join(cells)
                        + f" | {best} {r[best]['hit_rate'] / lru['hit_rate']:.2f}x"
                        + f" | {of_bound(r[best], r.get('belady-held'))}"
                        + f" | {lru['ttft_mean_s'] / r[best]['ttft_mean_s']:.2f}x"
                        + f" | {lru['e2e_mean_s'] / r[best]['e2e_mean_s']:.2f}x |")
    return ("GPU token hit rate (%) of every policy; the last columns compare the policy with the "
            "highest hit rate against LRU (hit-rate ratio, mean-TTFT and mean-E2E speed-ups) and its "
            "hit rate against `belady-held`, the proven bound under the same memory (MIN keeping "
            "the blocks running calls held, over the LRU replay's stream). "
            "Built by `python -m benchmarks.results --only summary` from the JSON of the runs below.\n\n"
            + "\n".join(rows) + "\n")


def of_bound(row: dict, bound: dict | None) -> str:
    """A policy's hit rate as a fraction of a bound's ("-" where the run has no such bound)."""
    if not bound or not bound.get("hit_rate"):
        return "-"
    return f"{row['hit_rate'] / bound['hit_rate']:.2f}"


def write(part: str, section: str) -> None:
    """Replace the text between this part's markers in docs/notes/results-details.md (appended if missing)."""
    path = DOCS / "notes" / "results-details.md"
    text = path.read_text()
    start, end = MARK.format(part=part, edge="start"), MARK.format(part=part, edge="end")
    if start not in text:
        text += f"\n{start}\n{end}\n"
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    body = re.sub(r"\n{3,}", "\n\n", section)
    path.write_text(f"{head}{start}\n{body}\n{end}{tail}")


def sweep_flags(ap: argparse.ArgumentParser, *, json_name: str, jobs: bool = True,
                apps: bool = False) -> None:
    """The flags the sweep scripts share: --no-docs, --docs-only (re-render from `json_name`, run
    nothing), for sweeps that run in parallel --jobs, and for those over the drawn applications
    --apps (both checked >= 1 by `check_counts`)."""
    if apps:
        ap.add_argument("--apps", type=int, default=24, help="applications: seeds 1..APPS")
    if jobs:
        ap.add_argument("--jobs", type=int, default=2, help="runs at once (one process each)")
    ap.add_argument("--no-docs", action="store_true", help="do not rewrite the docs")
    ap.add_argument("--docs-only", action="store_true",
                    help=f"re-render the docs from {json_name}, running nothing")


def rerun_flag(ap: argparse.ArgumentParser) -> None:
    """--rerun P,P: run only these policies and keep every other figure of the existing JSON (for
    a change that can move only them: the LRU safety net has no part in `lru`, the `oracle` or
    the offline bounds, which keep bit for bit what they had)."""
    ap.add_argument("--rerun", default=None, metavar="P,P",
                    help="run only these policies, keeping the other figures of the existing JSON")


def merge_rerun(old_rows: list[dict], row: dict, key: tuple[str, ...], policies: list[str]) -> dict:
    """`row` (a run of `policies` only) completed with the other policies' figures of the old row
    of the same `key` fields; it says which policies this round re-ran (`rerun`)."""
    old = next(r for r in old_rows if all(r[k] == row[k] for k in key))
    merged = dict(old, seconds=row["seconds"], rerun=policies)
    merged["results"] = {p: row["results"][p] if p in policies else r for p, r in old["results"].items()}
    return merged


def check_counts(ap: argparse.ArgumentParser, a: argparse.Namespace) -> None:
    """Refuse (argparse's one-line error) --jobs and --apps below 1, where the script has them."""
    for name in ("jobs", "apps"):
        v = getattr(a, name, None)
        if v is not None and v < 1:
            ap.error(f"--{name} must be >= 1, got {v}")


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.results", description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=["tables", "real", "summary", "all"], default="all")
    a = ap.parse_args()
    if a.only in ("tables", "all"):
        write("tables", tables())
    if a.only in ("real", "all"):
        write("real", real_traces())
    if a.only in ("summary", "tables", "all"):
        write("summary", summary())


if __name__ == "__main__":
    main()

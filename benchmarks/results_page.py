"""The results page, docs/results.md: each area's headline against its bound, rendered from the
stored JSON of the runs (no run happens here).

    python -m benchmarks.results_page            # write docs/results.md
    python -m benchmarks.results_page --check    # exit 1 where docs/results.md is not what the JSON renders

Every table names the command that wrote its JSON (docs/results/); the long-form analyses, with
every table of every run, are in docs/notes/results-details.md, whose sections the page lists at
its end. tests/test_results_page.py fails when the page and the JSON disagree. A table whose
JSON is absent says so and names the command that writes it. "agentrt" below means the
published policies (cachesage, pbkv-lae, pbkv-he, pbkv-ta); KVFlow and TTL pins are baselines.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

from benchmarks.results import FULL, QUARTER, WORKLOADS, pct  # the runs of `python -m benchmarks.results --only tables`

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "docs" / "results"
PAGE = REPO / "docs" / "results.md"
DETAILS = REPO / "docs" / "notes" / "results-details.md"
AGENTRT = ("cachesage", "pbkv-lae", "pbkv-he", "pbkv-ta")
MEMORY = ((FULL, "full"), (QUARTER, "a quarter"))


def load(rel: str) -> dict | None:
    path = RESULTS / rel
    return json.loads(path.read_text()) if path.exists() else None


def spread(xs: list[float], fmt: str = "{:.2f}") -> str:
    """Median (min-max); "min to max" where the figures carry a sign."""
    sep = " to " if fmt.startswith("{:+") else "-"
    return f"{fmt.format(statistics.median(xs))} ({fmt.format(min(xs))}{sep}{fmt.format(max(xs))})"


def missing(what: str, command: str) -> str:
    return f"No stored JSON for {what} in this checkout; `{command}` writes it.\n"


def best_agentrt(res: dict) -> str:
    return max((p for p in AGENTRT if p in res), key=lambda p: res[p]["hit_rate"])


def eviction() -> str:
    rows, ratios = [], []
    for w in WORKLOADS:
        for blocks, label in MEMORY:
            doc = load(f"{w}-gpu{blocks}.json")
            if doc is None:
                continue
            r = doc["results"]
            best, bound = best_agentrt(r), r["belady-held"]["hit_rate"]
            worst = min(100 * (r[p]["hit_rate"] - r["lru"]["hit_rate"]) for p in AGENTRT if p in r)
            ratios.append((r[best]["hit_rate"] / bound, w, label))
            rows.append(f"| {w} | {blocks:,} ({label}) | {pct(r['lru']['hit_rate'])} | {best} {pct(r[best]['hit_rate'])} | "
                        f"{pct(r['oracle']['hit_rate'])} | {pct(bound)} | {r[best]['hit_rate'] / bound:.2f} | {worst:+.1f} |")
    if not rows:
        return missing("the workload tables", "python -m benchmarks.results --only tables")
    ratios.sort()
    high = [x for x in ratios if x[0] >= 0.9]
    low = ", ".join(f"{w} at {m} memory {r:.2f}" for r, w, m in ratios if r < 0.9)
    return ("Simulator, Llama-3.1-8B on one H100 (`llama3.1-8b-h100`), 200 workflows, 16 at once, seed 0; "
            "GPU token hit rate, %. `belady-held` is clairvoyant MIN under the same memory, keeping the "
            "blocks running calls hold (the proven bound); `oracle` is clairvoyant eviction run inside "
            "the simulator. Written by `python -m benchmarks.results --only tables`.\n\n"
            "| workload | GPU blocks (memory) | LRU | best agentrt policy | oracle | belady-held | best / belady-held | worst agentrt vs LRU, points |\n"
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n" + "\n".join(rows) +
            f"\n\nThe best agentrt policy reaches {ratios[-1][0]:.2f} of `belady-held` at most, at least 0.90 in "
            f"{len(high)} of {len(ratios)} settings" + (f"; below that: {low}" if low else "") + ".\n")


def regimes() -> str:
    rows = [row for f in sorted((RESULTS / "regimes").glob("*.json"))
            for row in json.loads(f.read_text())["rows"]]
    if not rows:
        return missing("the regime sweep", "python -m benchmarks.regimes --workflows 80")
    of_bound, vs_lru = [], []
    # agentrt policy -> [(its points over LRU, the regime)], one per regime that ran it
    per: dict[str, list[tuple[float, str]]] = {p: [] for p in AGENTRT}
    for row in rows:
        r = row["results"]
        where = f"{row['workload']} tool x{row['tool_scale']:g} c{row['concurrency']} f{row['capacity_factor']:g}"
        for p in AGENTRT:
            if p in r:
                per[p].append((100 * (r[p]["hit_rate"] - r["lru"]["hit_rate"]), where))
        best = best_agentrt(r)
        if r.get("belady-held", {}).get("hit_rate"):
            of_bound.append(r[best]["hit_rate"] / r["belady-held"]["hit_rate"])
        vs_lru.append(100 * (r[best]["hit_rate"] - r["lru"]["hit_rate"]))
    ta_lru = [d for d, _ in per["pbkv-ta"]]
    below = {p: sum(d < -0.5 for d, _ in v) for p, v in per.items()}
    worst = min(((d, p, w) for p, v in per.items() for d, w in v), default=(0.0, "", ""))
    workloads = sorted({row["workload"] for row in rows})
    return (f"{len(rows)} regimes ({', '.join(workloads)}; tool time, concurrency and memory varied; "
            f"written by `python -m benchmarks.regimes --workflows 80`), median (min-max):\n\n"
            "| measure | value |\n| --- | ---: |\n"
            f"| best agentrt policy / `belady-held` | {spread(of_bound)} |\n"
            f"| best agentrt policy vs LRU, points | {spread(vs_lru, '{:+.1f}')} |\n"
            f"| pbkv-ta vs LRU, points | {spread(ta_lru, '{:+.1f}')} |\n"
            f"| regimes where the best agentrt policy is > 0.5 points below LRU | {sum(x < -0.5 for x in vs_lru)} |\n"
            f"| regimes where pbkv-ta is > 0.5 points below LRU | {sum(x < -0.5 for x in ta_lru)} |\n"
            f"| regimes where an agentrt policy is > 0.5 points below LRU, by policy | "
            f"{', '.join(f'{p} {n}' for p, n in below.items() if n) or 'none'} |\n"
            + (f"| the largest shortfall of an agentrt policy against LRU, points | {worst[0]:+.1f} "
               f"({worst[1]}, {worst[2]}) |\n" if worst[0] < 0 else "")
            + "\nEvery agentrt policy runs inside the LRU safety net (the default; `--no-safety-net` turns it "
            "off); where a policy's misses slow the replica enough to change which calls run together, "
            "the net's shadow LRU, which replays the policy's stream, cannot see what LRU would gain on "
            "its own ([runtime.md](runtime.md#the-lru-safety-net))." + long_sessions() + "\n")


def long_sessions() -> str:
    """One sentence on the long coding-agent sessions (docs/results/coding_long.json), where the
    published pbkv-he is measured against LRU at the median over memory sizes."""
    doc = load("coding_long.json")
    if doc is None or not doc.get("rows"):
        return ""
    from benchmarks.coding_long import AGENTRT, BASELINES, diffs, ratios
    own = [p for p in AGENTRT if p not in BASELINES]
    rows = [r for r in doc["rows"] if r["label"].startswith("coding")]
    worst_hit = max(((-statistics.median(diffs(r, p)), p) for r in rows for p in own), default=(0.0, "-"))
    worst_ttft = max(((statistics.median(ratios(r, p, "ttft_mean_s")), p) for r in rows for p in own),
                     default=(1.0, "-"))
    return (f" On long coding-agent sessions ({len(rows)} settings of block size and memory, each the median "
            f"over five memory sizes; `python -m benchmarks.coding_long`) the largest shortfall of an agentrt "
            f"policy against LRU with the net is {worst_hit[0]:.1f} points of hit rate ({worst_hit[1]}) and its "
            f"mean TTFT up to {worst_ttft[0]:.2f}x LRU's ({worst_ttft[1]}): where the net falls back, a reactive "
            f"test keeps the loss made before it can tell it from noise (`python -m benchmarks.lru_regret "
            f"--timeline`, [results-details](notes/results-details.md#long-coding-agent-sessions)).")


def admission() -> str:
    doc = load("schedulers.json")
    if doc is None:
        return missing("the scheduler runs", "python -m benchmarks.schedulers")
    rows = []
    for w, v in doc["workloads"].items():
        refined = {k: x["rate"] for k, x in v["goodput_refined"].items()}
        best = max((k for k in refined if k != "fcfs+lru"), key=refined.get)
        oracle = v["goodput_oracle"].get("fcfs+oracle", {}).get("rate")
        iso = v["isolated"]["e2e_mean_s"]
        e2e = {load_: x["rows"] for load_, x in v["points"].items()}
        cells = " | ".join(f"{e2e[l]['fcfs+lru']['e2e_mean_s'] / iso:.2f}x / {e2e[l][best]['e2e_mean_s'] / iso:.2f}x"
                           for l in sorted(e2e) if best in e2e[l])
        rows.append(f"| {w} | {refined['fcfs+lru']:.5f} | {best} {refined[best]:.5f} ({refined[best] / refined['fcfs+lru']:.2f}x) | "
                    f"{oracle:.5f} | {refined[best] / oracle:.2f} | {cells} |")
    loads = sorted(next(iter(doc["workloads"].values()))["points"])
    return (f"Simulator, `{doc['preset']}`, Poisson arrivals; goodput is the highest rate (workflows/s) whose "
            f"p90 TTFT stays within {doc['slo_p90_ttft_s']:g} s, refined by bisection. The bound beside it is "
            "clairvoyant eviction's goodput under FCFS (`fcfs+oracle`); the isolated bound is each "
            "workflow's E2E alone on an unbounded replica. Written by `python -m benchmarks.schedulers`.\n\n"
            "E2E columns: the mean E2E over the isolated bound, FCFS + LRU / the best pair, at a load "
            "of that share of FCFS + LRU's sustainable rate.\n\n"
            "| workload | FCFS + LRU goodput | best admission + eviction | FCFS + oracle goodput | best / oracle | "
            + " | ".join(f"E2E / isolated at {l}" for l in loads) + " |\n"
            "| --- | ---: | ---: | ---: | ---: | " + " | ".join("---:" for _ in loads) + " |\n" + "\n".join(rows) + "\n"
            + "\n" + live_admission())


def live_admission() -> str:
    """The admission gate in front of a live vLLM against stock vLLM, per stored run."""
    from benchmarks.live_admission_report import stored_runs
    docs = stored_runs()
    if not docs:
        return missing("admission on the live engine", "python -m benchmarks.live_admission")
    rows = []
    for name, d in docs.items():
        for load_, pairs in d["loads"].items():
            stock = pairs["stock"]
            for p, m in pairs.items():
                if p == "stock" or not m.get("e2e_mean_s"):
                    continue
                sim = (f"{stock['sim_e2e_mean_s'] / m['sim_e2e_mean_s']:.2f}x"
                       if m.get("sim_e2e_mean_s") and stock.get("sim_e2e_mean_s") else "-")
                lo, hi = m["e2e_mean_s_range"]
                rows.append(f"| {name} | {load_} | {p} | "
                            f"{stock['e2e_mean_s']:.1f} | {m['e2e_mean_s']:.1f} ({lo:.1f}-{hi:.1f}) | "
                            f"{stock['e2e_mean_s'] / m['e2e_mean_s']:.2f}x | {sim} | "
                            f"{stock['ttft_p99_s']:.2f} / {m['ttft_p99_s']:.2f} |")
    s = next(iter(docs.values()))["settings"]
    return ("On the live engine (vLLM 0.32 on the CPU, the tiny model; `agentrt serve --scheduler NAME` in front "
            "for the gated pairs, the connector alone for `fcfs+`), at shares of stock vLLM's sustainable rate "
            f"found live; medians of {s['runs']} runs, speed-up = stock's mean workflow E2E over the pair's, "
            "the simulator's for the same calls beside it. Written by "
            "`python -m benchmarks.live_admission`; reading in [notes/results-details.md]"
            "(notes/results-details.md#agent-admission-on-live-vllm).\n\n"
            "| workload | load | pair | stock E2E s | pair E2E s (range) | speed-up | simulator's | "
            "TTFT p99 s, stock / pair |\n| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |\n"
            + "\n".join(rows) + "\n")


def routing() -> str:
    doc = load("router_bounds.json")
    if doc is None:
        return missing("the router bounds", "python -m benchmarks.routers --part bounds")
    rows = []
    for run in doc["runs"]:
        pairs = {(router, pol): x["hit_rate"] for router, pols in run["routers"].items()
                 for pol, x in pols.items() if not pol.startswith("oracle")}
        (router, pol), hit = max(pairs.items(), key=lambda kv: kv[1])
        pooled = run["pooled"]["oracle"]["hit_rate"]
        rows.append(f"| {run['workload']} | {run['replicas']} | {pct(run['routers']['prefix']['lru']['hit_rate'])} | "
                    f"{router} + {pol} {pct(hit)} | {pct(run['pooled']['lru']['hit_rate'])} | {pct(pooled)} | {hit / pooled:.2f} |")
    return ("Simulator, several replicas of `" + doc["settings"]["preset"] + "`; hit rate, %. The pooled bound is one "
            "replica holding every replica's memory under clairvoyant eviction (no routing can share "
            f"more). Written by `{doc['settings']['command']}`.\n\n"
            "| workload | replicas | prefix router + LRU | best router + policy | pooled LRU | pooled oracle (bound) | best / bound |\n"
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n" + "\n".join(rows) + "\n")


def live() -> str:
    parts = []
    for label, stem in (("trained on the first 10 workflows", "team40-pbkv-ta-run"),
                        ("no training (online forecasts)", "team40-pbkv-ta-untrained-run")):
        runs = [d for i in (1, 2, 3) if (d := load(f"engine/{stem}{i}.json"))]
        if not runs:
            continue
        stock = [d["results"]["lru"] for d in runs]
        ours = [d["results"]["pbkv-ta"] for d in runs]
        gain = [100 * (o["hit_rate"] - s["hit_rate"]) for o, s in zip(ours, stock)]
        ttft = [s["ttft_mean_s"] / o["ttft_mean_s"] for o, s in zip(ours, stock)]
        e2e = [s["e2e_mean_s"] / o["e2e_mean_s"] for o, s in zip(ours, stock)]
        parts.append(f"| team, 40 workflows, {label} | {len(runs)} | {spread([x['hit_rate'] * 100 for x in stock], '{:.1f}')} | "
                     f"{spread([x['hit_rate'] * 100 for x in ours], '{:.1f}')} | {spread(gain, '{:+.1f}')} | "
                     f"{spread(ttft)}x | {spread(e2e)}x |")
    hits = ("Eviction inside vLLM 0.32 on the CPU (the small random-weight Llama, 192 blocks), stock vLLM "
            "(its own LRU) against the AgentRTConnector with pbkv-ta on the same calls, one pair per run; "
            "written by `agentrt bench --engine vllm --model-size small --trace team-40.jsonl --policies "
            "lru,pbkv-ta --vllm-blocks 192 --scale 0.125 --think-scale 1.0` (untrained: `--train-fraction 0`). "
            "Speed-ups are stock's mean over pbkv-ta's (> 1: pbkv-ta faster):\n\n"
            "| calls | runs | stock hit % | pbkv-ta hit % | gain, points | mean TTFT speed-up | mean E2E speed-up |\n"
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n" + "\n".join(parts) + "\n") if parts else \
        missing("the live team runs", "agentrt bench --engine vllm ... --policies lru,pbkv-ta")
    return hits + "\n" + connector_cost()


def connector_cost() -> str:
    doc = load("engine/connector_cost.json")
    if doc is None:
        return missing("the connector's cost", "python -m benchmarks.connector_cost")
    from agentrt.enginebench.connector_cost import label, paired_of
    rows = []
    for name, res in doc["loads"].items():
        for variant, vs in paired_of(res).items():
            rows.append(f"| {name} | {label(variant)} | {vs['request_throughput']:.3f} | {vs['mean_ttft_s']:.3f} | "
                        f"{vs['mean_tpot_ms']:.3f} | {res['variants']['stock']['runs']} |")
    return ("What configuring the connector costs, against stock vLLM on the same calls with vLLM's own "
            "benchmark client (Mooncake's conversation trace, the tiny model, 2 CPU cores); each figure "
            "is the median over rounds of the variant's run over stock's in the same round (1.000: no "
            "cost; > 1 worse for TTFT and TPOT, < 1 worse for throughput). Written by "
            "`python -m benchmarks.connector_cost`; the full table and how to read it are in "
            "[vllm.md](vllm.md#what-the-connector-costs).\n\n"
            "| load | engine | requests/s | mean TTFT | mean TPOT | runs |\n| --- | --- | ---: | ---: | ---: | ---: |\n"
            + "\n".join(rows) + "\n")


def fidelity() -> str:
    docs = sorted(RESULTS.glob("engine/fidelity-*.json"))
    if not docs:
        return missing("the simulator against the engine",
                       "python -m benchmarks.fidelity --workload team --seed 0 --runs 3 "
                       "--json docs/results/engine/fidelity-team.json")
    rows, gaps, e2e, ttft, disorder, before, after, hosted, drift = [], [], {}, {}, [], {}, {}, [], {}
    for f in docs:
        doc = json.loads(f.read_text())
        name = f.stem.removeprefix('fidelity-')
        host = (doc.get("settings", {}).get("preset") or {}).get("host_per_call_s")
        if host is not None:
            hosted.append(f"{name} ({host * 1e3:.1f} ms)")
        disorder += [f"{name}: {pair}" for pair in doc.get("order_disagreements") or ()]
        for pol, x in doc["policies"].items():
            rows.append(f"| {name} | {pol} | {pct(x['live_hit'])} | {pct(x['sim_hit'])} | "
                        f"{x['live_ttft_mean_s']:.2f} | {x['sim_ttft_mean_s']:.2f} | {x['live_e2e_mean_s']:.1f} | {x['sim_e2e_mean_s']:.1f} |")
            gaps.append(abs(x["sim_hit"] - x["live_hit"]) * 100)
            if (b := x.get("sim_ttft_mean_s_before")) is not None:
                drift.setdefault(name, []).append(abs(b - x["sim_ttft_mean_s_after"]) / x["sim_ttft_mean_s"])
            e2e.setdefault(name, []).append(x["e2e_mean_s_ratio"])
            ttft.setdefault(name, []).append(x["ttft_mean_s_ratio"])
            if split := x.get("ttft_split"):
                before.setdefault(name, []).append(split["sim_to_scheduled_s"] / split["live_to_scheduled_s"])
                after.setdefault(name, []).append(split["sim_scheduled_to_first_s"] / split["live_scheduled_to_first_s"])

    def ratios(d: dict) -> str:
        return "; ".join(f"{n} {min(v):.2f}-{max(v):.2f}x" for n, v in d.items())
    return ("The same calls live and in the simulator on a preset measured on that engine "
            "(`python -m benchmarks.fidelity`; live figures are medians of its runs):\n\n"
            "| calls | policy | live hit % | simulator hit % | live TTFT s | simulator TTFT s | live E2E s | simulator E2E s |\n"
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n" + "\n".join(rows) + "\n\n"
            f"The simulator's hit rate is within {max(gaps):.1f} points of the live median for every policy "
            f"and calls above; it orders them as the live runs separate them"
            + (f" except {', '.join(disorder)}" if disorder else "") + ". "
            f"Its mean E2E over the live one: {ratios(e2e)}; its mean TTFT: {ratios(ttft)}. "
            "Live runs put vLLM's engine core at nice 19: on this 2-core host its busy loop otherwise starved "
            "the measuring client of CPU, which then saw tokens in bursts vLLM did not make. "
            + (f"Cut where the engine first schedules a call, the simulator's TTFT after that point over the "
               f"live one: {ratios(after)}; before it (the request's path, the wait for an iteration, the "
               f"queue): {ratios(before)}. " if before else "")
            + (f"Presets measured with the host's cost per call (`host_per_call_s`: on this 2-core host the CPU a "
               f"call's handling takes is time the engine does not step): {', '.join(hosted)}"
               + ("; the others were measured before it and leave it out" if len(hosted) < len(docs) else "")
               + ". " if hosted else "")
            + (f"Calibrated before and after the live runs, each simulator figure the mean of the two presets' "
               f"(the machine drifts): {', '.join(f'{n} (the two moved mean TTFT by up to {100 * max(v):.0f}%)' for n, v in drift.items())}. "
               if drift else "")
            + "[Where the gap lives](notes/results-details.md#the-simulator-against-the-engine), call by call.\n")


def details_index() -> str:
    if not DETAILS.exists():
        return ""
    lines = []
    for level, head in re.findall(r"^(##|###) (.+)$", DETAILS.read_text(), flags=re.M):
        indent = "  " if level == "###" else ""
        lines.append(f"{indent}- [{head}](notes/results-details.md#{anchor(head)})")
    return "\n".join(lines) + "\n"


def anchor(head: str) -> str:
    """GitHub's anchor for a heading."""
    return re.sub(r"[^\w\- ]", "", head.strip().lower()).replace(" ", "-")


def render() -> str:
    sections = [
        ("Eviction against the best possible under the same memory", eviction()),
        ("Eviction over 80 regimes", regimes()),
        ("Admission against its bounds", admission()),
        ("Routing against the pooled bound", routing()),
        ("Live vLLM against stock vLLM", live()),
        ("The simulator against the engine", fidelity()),
    ]
    head = ("# Results\n\n<!-- Rendered by `python -m benchmarks.results_page` from docs/results/*.json: "
            "edit the script, not this page. -->\n\n"
            "Each area of agentrt against its bound, from the stored JSON of the command named beside "
            "each table. Simulator figures are deterministic (simulated time; same seed, same numbers); "
            "live figures were measured on a shared 2-core machine, so compare ratios within one run. "
            "Every table of every run, and the analyses behind these, are in "
            "[notes/results-details.md](notes/results-details.md).\n")
    body = "\n".join(f"## {title}\n\n{text}" for title, text in sections)
    return f"{head}\n{body}\n## Everything else\n\n{details_index()}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.results_page", description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if docs/results.md differs from the render")
    a = ap.parse_args(argv)
    text = render()
    if a.check:
        if PAGE.read_text() != text:
            print(f"{PAGE} differs from what its JSON renders: run python -m benchmarks.results_page")
            return 1
        print(f"{PAGE} matches its JSON")
        return 0
    PAGE.write_text(text)
    print(f"wrote {PAGE} ({text.count(chr(10))} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

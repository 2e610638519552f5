"""Admission against eviction: the `agent` scheduler's prefix hold on the 24 drawn applications.

    python -m benchmarks.prefix_hold               # 24 applications x 2 capacities, 3 runs each
    python -m benchmarks.prefix_hold --docs-only   # re-render the table from the JSON

The traces and memory are `benchmarks/generalise.py`'s: `agentrt generate random --workflows 80
--seed SEED --concurrency 8`, memory f x the live footprint (f = 0.5 and 1). On each, three
`agentrt bench` runs: FCFS (lru, pbkv-ta, the in-simulator oracle, the offline infinite-cache
bound), the `agent` scheduler without its prefix hold (`--no-prefix-hold`: lru, pbkv-ta), and
with it (lru, pbkv-ta, oracle). The hold keeps a call whose next prompt blocks another call is
computing waiting until they are cached (`sched/inflight.py`): under FCFS a fan-out's parallel
instances, admitted together, each compute their shared prompt, which no eviction order, the
oracle's included, can save. Nothing is tuned: the hold has no parameter but the scheduler's
wait bound. Writes docs/results/prefix_hold.json and the table between the `results:prefix-hold`
markers of docs/notes/results-details.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from agentrt.workloads.randomapp import draw_app
from benchmarks.generalise import CAPACITY, LOAD, WORKFLOWS
from benchmarks.regimes import run
from benchmarks.results import DOCS, check_counts, sweep_flags, write

OUT = DOCS / "results" / "prefix_hold.json"
VARIANTS = {"fcfs": ((), ["lru", "pbkv-ta", "oracle", "infinite"]),
            "agent-no-hold": (("--scheduler", "agent", "--no-prefix-hold"), ["lru", "pbkv-ta"]),
            "agent": (("--scheduler", "agent"), ["lru", "pbkv-ta", "oracle"])}


def run_app(seed: int, tmp: Path, variants: dict | None = None) -> list[dict]:
    """Both capacities of one application, each under the three variants (or `variants`:
    name -> (extra bench arguments, policies))."""
    rows = []
    for f in CAPACITY:
        row = None
        for name, (extra, policies) in (variants or VARIANTS).items():
            r = run("random", 1.0, LOAD, f, WORKFLOWS, tmp, seed, policies=policies, extra=extra)
            if row is None:
                row = {k: r[k] for k in ("seed", "capacity_factor", "gpu_blocks", "generate")}
                row["commands"], row["results"] = {}, {}
            row["commands"][name] = r["command"]
            row["results"][name] = r["results"]
        rows.append(row)
    return rows


def fig(row: dict, variant: str, policy: str, key: str = "hit_rate") -> float:
    return row["results"][variant][policy][key]


def table(rows: list[dict]) -> str:
    head = ("| app | shape | f | FCFS lru / pbkv-ta / oracle | agent, no hold: lru / pbkv-ta | "
            "agent: lru / pbkv-ta / oracle | infinite | E2E mean s, FCFS + lru / agent + pbkv-ta |")
    out = [head, "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        p = lambda v, x: f"{100 * fig(r, v, x):.1f}"   # noqa: E731
        out.append(f"| {r['seed']} | {draw_app(r['seed']).describe()} | {r['capacity_factor']:g} | "
                   f"{p('fcfs', 'lru')} / {p('fcfs', 'pbkv-ta')} / {p('fcfs', 'oracle')} | "
                   f"{p('agent-no-hold', 'lru')} / {p('agent-no-hold', 'pbkv-ta')} | "
                   f"{p('agent', 'lru')} / {p('agent', 'pbkv-ta')} / {p('agent', 'oracle')} | "
                   f"{p('fcfs', 'infinite')} | {fig(r, 'fcfs', 'lru', 'e2e_mean_s'):.1f} / "
                   f"{fig(r, 'agent', 'pbkv-ta', 'e2e_mean_s'):.1f} |")
    seeds = sorted({r["seed"] for r in rows})
    return (f"Applications {seeds[0]}-{seeds[-1]} of the generalisation sweep's 24 (seeds in order, "
            "none left out).\n\n" + "\n".join(out) + "\n\n" + summary(rows))


def summary(rows: list[dict]) -> str:
    fan = [r for r in rows if draw_app(r["seed"]).delegator >= 0]
    rest = [r for r in rows if draw_app(r["seed"]).delegator < 0]

    def pts(rs, a, b, policy="lru"):     # hit rate of variant a minus variant b, in points
        return [100 * (fig(r, a, policy) - fig(r, b, policy)) for r in rs]

    def span(xs):
        return f"{min(xs):+.1f} to {max(xs):+.1f} (median {statistics.median(xs):+.1f})" if xs else "-"
    beat = [r for r in rows if fig(r, "agent", "pbkv-ta") >= fig(r, "fcfs", "oracle")]
    share = [fig(r, "agent", "pbkv-ta") / fig(r, "agent", "oracle") for r in rows if fig(r, "agent", "oracle") > 0]
    scope = [r for r in rows if fig(r, "agent", "oracle") >= 1.3 * fig(r, "agent", "lru")]
    reach = [r for r in scope if fig(r, "agent", "pbkv-ta") >= 0.95 * fig(r, "agent", "oracle")]
    e2e = [fig(r, "fcfs", "lru", "e2e_mean_s") / fig(r, "agent", "pbkv-ta", "e2e_mean_s") for r in rows]
    hold_e2e = [fig(r, "agent-no-hold", "lru", "e2e_mean_s") / fig(r, "agent", "lru", "e2e_mean_s") for r in rows]
    return (f"The hold (agent minus agent without it, LRU, points): on the {len(fan) // 2} applications "
            f"with a fan-out {span(pts(fan, 'agent', 'agent-no-hold'))}; on the {len(rest) // 2} without "
            f"{span(pts(rest, 'agent', 'agent-no-hold'))}. Its mean E2E speed-up (agent without it / "
            f"with it, LRU): {min(hold_e2e):.2f}-{max(hold_e2e):.2f}x. agent + pbkv-ta reaches FCFS + "
            f"oracle's hit rate in {len(beat)} of {len(rows)} runs; agent + oracle against FCFS + oracle "
            f"{span(pts(rows, 'agent', 'fcfs', 'oracle'))} points. Mean E2E, FCFS + lru over agent + "
            f"pbkv-ta: {min(e2e):.2f}-{max(e2e):.2f}x (median {statistics.median(e2e):.2f}x). Under the "
            f"agent scheduler pbkv-ta reaches {min(share):.2f}-{max(share):.2f}x its oracle (median "
            f"{statistics.median(share):.2f}x); where that oracle is at least 1.3x LRU ({len(scope)} runs), "
            f"0.95x in {len(reach)}.\n")


def save(rows: list[dict], out: Path = OUT, variants: dict | None = None) -> None:
    out.write_text(json.dumps({"workflows": WORKFLOWS, "concurrency": LOAD,
                               "variants": {k: {"args": list(v[0]), "policies": v[1]}
                                            for k, v in (variants or VARIANTS).items()}, "rows": rows}, indent=1))


def sweep(a: argparse.Namespace, variants: dict, out: Path, line) -> list[dict]:
    """Every application's runs under `variants` (`a.apps`, `a.jobs` at once), saved to `out` as
    they finish (so a long run can be cut short), each row printed as `line(row)`; or, with
    `a.docs_only`, the rows `out` holds."""
    if a.docs_only:
        return json.loads(out.read_text())["rows"]
    rows = []
    with tempfile.TemporaryDirectory(prefix="agentrt-sweep-") as d, ThreadPoolExecutor(a.jobs) as pool:
        futures = [pool.submit(run_app, s, Path(d), variants) for s in range(1, a.apps + 1)]
        for fut in futures:
            for r in fut.result():
                rows.append(r)
                save(rows, out, variants)
                print(line(r), flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.prefix_hold", description=__doc__.splitlines()[0])
    sweep_flags(ap, json_name="docs/results/prefix_hold.json", apps=True)
    a = ap.parse_args()
    check_counts(ap, a)
    rows = sweep(a, VARIANTS, OUT, lambda r: (
        f"app {r['seed']:3d} f{r['capacity_factor']:g}: fcfs lru {100 * fig(r, 'fcfs', 'lru'):.1f} "
        f"oracle {100 * fig(r, 'fcfs', 'oracle'):.1f} | agent no hold lru "
        f"{100 * fig(r, 'agent-no-hold', 'lru'):.1f} | agent lru {100 * fig(r, 'agent', 'lru'):.1f} "
        f"pbkv-ta {100 * fig(r, 'agent', 'pbkv-ta'):.1f} oracle {100 * fig(r, 'agent', 'oracle'):.1f}"))
    if not a.no_docs:
        write("prefix-hold", "Built by `python -m benchmarks.prefix_hold` (docs/results/prefix_hold.json has "
                             "every run's command); each row's trace is `agentrt generate random --workflows "
                             f"{WORKFLOWS} --seed SEED --concurrency {LOAD}`. Token hit rates in %.\n\n"
                             + table(rows))


if __name__ == "__main__":
    main()

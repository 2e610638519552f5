"""What the LRU safety net costs the policies where they win: the 80-regime table and the drawn
applications with the net (docs/results/regimes/*.json and docs/results/generalise.json after
`python -m benchmarks.regimes --workflows 80 --rerun P,P` and `python -m benchmarks.generalise
--rerun P,P`, P the agentrt policies) against the same tables before the net existed (the same
files at an earlier git revision, `--before`).

    python -m benchmarks.net_cost --before bf38d6b [--json docs/results/net_cost.json]

Same traces, same memory, same commands: the only change between the two is the net (and any
policy change between the revisions, which is why `--before` should be the last revision whose
regime figures were measured, not an older one). Per policy: the regimes where the net fell
back, and the largest drop and largest gain in hit rate (points) against the figure before.
The net changes nothing in a run where it never falls back, so those regimes must match to the
digit; a difference there is a policy change, and is reported as such.
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

from benchmarks.regimes import AGENTRT, WORKLOADS
from benchmarks.results import DOCS

TABLES = {"regimes": ([f"docs/results/regimes/{w}.json" for w in WORKLOADS],
                       ("workload", "tool_scale", "concurrency", "capacity_factor")),
          "applications": (["docs/results/generalise.json"], ("seed", "capacity_factor"))}


def rows_at(rev: str | None, table: str) -> dict[tuple, dict]:
    """A table's rows, keyed, from the working tree (`rev` None) or from git at `rev`."""
    files, key = TABLES[table]
    out = {}
    for rel in files:
        if rev is None:
            text = (DOCS.parent / rel).read_text()
        else:
            text = subprocess.run(["git", "show", f"{rev}:{rel}"], cwd=DOCS.parent, check=True,
                                  capture_output=True, text=True).stdout
        for r in json.loads(text)["rows"]:
            out[tuple(r[k] for k in key)] = r
    return out


def compare(before: dict[tuple, dict], after: dict[tuple, dict]) -> dict:
    missing = sorted(set(before) ^ set(after))
    if missing:
        raise SystemExit(f"error: the two tables differ in their rows: {missing[:3]}")
    per = {}
    for p in AGENTRT:
        fell, drop, gain, moved_without = [], (0.0, None), (0.0, None), []
        for key, row in after.items():
            r = row["results"][p]
            d = 100 * (r["hit_rate"] - before[key]["results"][p]["hit_rate"])
            net = r.get("safety_net") or {}
            if net.get("fallbacks"):
                fell.append({"regime": list(key), "points": d, "fallback_share": net.get("fallback_share")})
            elif abs(d) > 1e-9:
                moved_without.append({"regime": list(key), "points": d})
            if d < drop[0]:
                drop = (d, list(key))
            if d > gain[0]:
                gain = (d, list(key))
        per[p] = {"fell_back": fell, "largest_drop": drop, "largest_gain": gain,
                  "changed_without_a_fallback": moved_without}
    return {"rows": len(after), "policies": per}


def render(doc: dict, table: str) -> str:
    lines = [f"{table}: {doc['rows']} rows, hit rate with the net against before it (points):"]
    for p, r in doc["policies"].items():
        d, dk = r["largest_drop"]
        g, gk = r["largest_gain"]
        lines.append(f"  {p:10s} fell back in {len(r['fell_back']):2d}; largest drop {d:+.2f}"
                     + (f" ({' '.join(str(x) for x in dk)})" if dk else "")
                     + f", largest gain {g:+.2f}" + (f" ({' '.join(str(x) for x in gk)})" if gk else "")
                     + (f"; {len(r['changed_without_a_fallback'])} rows changed without a fallback"
                        if r["changed_without_a_fallback"] else ""))
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.net_cost", description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="git revision of the regime figures before the net")
    ap.add_argument("--json", type=Path, default=None, help="write the comparison here")
    a = ap.parse_args()
    if a.json and not a.json.parent.is_dir():
        ap.error(f"--json: directory {a.json.parent} does not exist")
    doc = {"command": f"python -m benchmarks.net_cost --before {a.before}", "before": a.before}
    for table in TABLES:
        doc[table] = compare(rows_at(a.before, table), rows_at(None, table))
        print(render(doc[table], table))
    if a.json:
        a.json.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {a.json}")


if __name__ == "__main__":
    main()

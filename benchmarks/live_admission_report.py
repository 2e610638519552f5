"""Summaries, the issue's criteria and the docs table of `benchmarks/live_admission.py` runs.

`summarise` takes one pair's runs at one load to medians and ranges (and the simulator's medians
for the same calls); `criteria` computes the done-when checks from a run's document; `markdown`
renders every stored docs/results/engine/live-admission-*.json for docs/notes/results-details.md
(`python -m benchmarks.live_admission --docs`).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from benchmarks.results import write

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results" / "engine"
FIGURES = ("e2e_mean_s", "e2e_p99_s", "ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "hit_rate")


def summarise(rows: list[dict]) -> dict:
    """Medians and ranges over runs; the simulator's figures (the same calls each run)."""
    m: dict = {"runs": len(rows)}
    for k in FIGURES:
        vals = [r[k] for r in rows if r.get(k) is not None]
        if vals:
            m[k] = statistics.median(vals)
            m[f"{k}_range"] = [min(vals), max(vals)]
        sims = [r[f"sim_{k}"] for r in rows if r.get(f"sim_{k}") is not None]
        if sims:
            m[f"sim_{k}"] = statistics.median(sims)
    m["errors"] = sum(r.get("errors") or 0 for r in rows)
    return m


def criteria(doc: dict) -> dict:
    """The issue's done-when checks, computed from the medians (None where a figure is missing)."""
    hi, lo = doc["loads"].get("1.2", {}), doc["loads"].get("0.8", {})
    stock_hi, stock_lo = hi.get("stock"), lo.get("stock")
    pairs = [p for p in hi if p != "stock" and hi[p].get("e2e_mean_s")]
    if not stock_hi or not pairs:
        return {}
    best = min(pairs, key=lambda p: hi[p]["e2e_mean_s"])
    out = {"best_pair": best, "e2e_mean_x_at_1.2": stock_hi["e2e_mean_s"] / hi[best]["e2e_mean_s"],
           "e2e_p99_no_worse_at_1.2": hi[best]["e2e_p99_s"] <= stock_hi["e2e_p99_s"]}
    if stock_lo and best in lo:
        out["e2e_mean_worse_at_0.8"] = lo[best]["e2e_mean_s"] / stock_lo["e2e_mean_s"] - 1
        out["ttft_p99_worse_at_0.8"] = lo[best]["ttft_p99_s"] / stock_lo["ttft_p99_s"] - 1
    g = doc.get("goodput", {})
    if g.get("stock") and best in g:
        out["goodput_x"] = g[best] / g["stock"]
    sim_s, sim_b = stock_hi.get("sim_e2e_mean_s"), hi[best].get("sim_e2e_mean_s")
    if sim_s and sim_b:
        out["sim_e2e_mean_x_at_1.2"] = sim_s / sim_b
        out["sim_ratio_error"] = out["sim_e2e_mean_x_at_1.2"] / out["e2e_mean_x_at_1.2"] - 1
    return out


def fmt(m: dict, k: str, d: int = 2) -> str:
    v = m.get(k)
    return "" if v is None else f"{v:.{d}f}"


def markdown(docs: dict[str, dict]) -> str:
    lines = []
    for name, d in docs.items():
        s = d["settings"]
        lines += [f"**{name}** ({s['source']}, {s['runs']} runs each, the {s['model_size']} model, "
                  f"{s['vllm_blocks']}-block pool): stock vLLM's sustainable rate "
                  f"{d['sustainable_rate']:.4f} workflows/s at p90 TTFT <= {d['slo_ttft_p90_s']:.2f} s. "
                  f"`{s['command']}`", "",
                  "| load | pair | E2E mean s (range) | sim | E2E p99 s | sim | TTFT p50 s | TTFT p99 s | "
                  "hit % | goodput /s |",
                  "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for load, pairs in d["loads"].items():
            for p, m in pairs.items():
                rng = m.get("e2e_mean_s_range") or [0, 0]
                hit = m.get("hit_rate")
                lines.append(f"| {load} | {p} | {fmt(m, 'e2e_mean_s', 1)} ({rng[0]:.1f}-{rng[1]:.1f}) | "
                             f"{fmt(m, 'sim_e2e_mean_s', 1)} | {fmt(m, 'e2e_p99_s', 1)} | "
                             f"{fmt(m, 'sim_e2e_p99_s', 1)} | {fmt(m, 'ttft_p50_s')} | {fmt(m, 'ttft_p99_s')} | "
                             f"{'' if hit is None else f'{100 * hit:.1f}'} | "
                             f"{d['goodput'].get(p, 0):.4f} |")
        c = d.get("criteria") or {}
        if c:
            lines += ["", "Against the issue's bar: " + ", ".join(
                f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in c.items()) + "."]
        lines.append("")
    return "\n".join(lines)


def stored_runs() -> dict[str, dict]:
    """Every stored live run (docs/results/engine/live-admission-NAME.json) by NAME; a --sim-only
    screen is the simulator's prediction, not a live result, and is never among them."""
    docs = {p.stem.removeprefix("live-admission-"): json.loads(p.read_text())
            for p in sorted(RESULTS.glob("live-admission-*.json"))}
    return {k: d for k, d in docs.items() if not d.get("settings", {}).get("sim_only")}


def write_docs() -> None:
    docs = stored_runs()
    write("live-admission", markdown(docs) if docs else "No stored run yet.")
    print("updated docs/notes/results-details.md")

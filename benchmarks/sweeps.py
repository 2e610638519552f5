"""The two sweeps of docs/notes/results-details.md: hit rate against GPU KV capacity, and against predictor noise.

    python -m benchmarks.sweeps [--workload mix] [--workflows 200]
    python -m benchmarks.sweeps --plot-only          # redraw the figures from sweeps.json

- Pressure sweep: each policy at GPU capacities from 2,000 blocks to the preset's full memory
  (25,720 blocks of 16 tokens, Llama-3.1-8B on H100), on one generated trace; Belady beside.
- Noise sweep: PBKV-HE with its predictions blended with random ones at strength E (0 to 1),
  against PBKV-LAE and LRU, at the full KV memory and at a quarter of it.
Writes docs/figures/pressure_sweep.png, docs/figures/noise_sweep.png and docs/results/sweeps.json.
Every point is one simulator replay of the same trace (training split: first 25% of workflows).
Figures: every policy has its own colour, marker and line style (lines that coincide stay
visible), axes start at 0% hit rate, and the noise panels share their axes.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from agentrt.bench.runner import BenchOptions, run_bench
from agentrt.bench.source import file_source
from agentrt.trace.writer import write_trace
from agentrt.workloads.base import GenConfig
from agentrt.workloads.registry import get_workload

REPO = Path(__file__).resolve().parents[1]
CAPACITIES = [2000, 3000, 4500, 6430, 10000, 15000, 25720]
SWEEP_POLICIES = ["lru", "cachesage", "kvflow", "pbkv-lae", "pbkv-he", "pbkv-ta", "oracle", "belady"]
NOISES = [0.0, 0.1, 0.25, 0.5, 0.75, 1.0]
CONCURRENCY = 64     # the sweeps' regime: a saturated replica (docs/notes/results-details.md)
# (colour, marker, line style) per policy: distinct on all three, so overlapping lines show
STYLES = {"lru": ("#333333", "o", "-"), "cachesage": ("tab:blue", "s", "-"),
          "kvflow": ("tab:green", "^", "--"), "pbkv-lae": ("tab:orange", "D", "-."),
          "pbkv-he": ("tab:red", "v", ":"), "pbkv-ta": ("tab:brown", "P", "-"),
          "oracle": ("tab:gray", "*", "--"), "belady": ("tab:purple", "x", (0, (5, 2, 1, 2)))}


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.sweeps", description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="mix")
    ap.add_argument("--workflows", type=int, default=200)
    ap.add_argument("--noise-blocks", default="25720,6430")
    ap.add_argument("--only", choices=["pressure", "noise", "all"], default="all")
    ap.add_argument("--plot-only", action="store_true", help="redraw the figures from sweeps.json, no replay")
    a = ap.parse_args()
    res = REPO / "docs" / "results"
    old = res / "sweeps.json"
    if a.plot_only:
        plot(json.loads(old.read_text()))
        return
    wl = get_workload(a.workload)
    cfg = GenConfig(workflows=a.workflows, concurrency=CONCURRENCY, seed=0)
    out: dict = {"workload": a.workload, "workflows": a.workflows, "concurrency": CONCURRENCY,
                 "pressure": {}, "noise": {}}
    if a.only != "all" and old.exists():
        prev = json.loads(old.read_text())
        out["pressure"] = {int(k): v for k, v in prev.get("pressure", {}).items()}
        out["noise"] = {int(k): {**v, "pbkv-he": {float(e): h for e, h in v["pbkv-he"].items()}}
                        for k, v in prev.get("noise", {}).items() if isinstance(v, dict) and "pbkv-he" in v}
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / f"{a.workload}.jsonl"
        write_trace(path, wl.header(cfg), wl.generate(cfg))
        src = file_source(path)
        src.label = f"workload:{a.workload} (workflows={a.workflows}, seed=0)"
        if a.only in ("pressure", "all"):
            for blocks in CAPACITIES:
                t0 = time.time()
                doc = run_bench(src, SWEEP_POLICIES, BenchOptions(gpu_blocks=blocks, train_fraction=0.25))
                out["pressure"][blocks] = {p: r["hit_rate"] for p, r in doc["results"].items()}
                print(f"capacity {blocks}: " + ", ".join(f"{p} {100 * h:.1f}%" for p, h in out["pressure"][blocks].items())
                      + f" ({time.time() - t0:.0f} s)", flush=True)
        if a.only in ("noise", "all"):
            for blocks in (int(b) for b in a.noise_blocks.split(",")):
                base = run_bench(src, ["lru", "pbkv-lae"], BenchOptions(gpu_blocks=blocks, train_fraction=0.25))
                row = out["noise"][blocks] = {"lru": base["results"]["lru"]["hit_rate"],
                                              "pbkv-lae": base["results"]["pbkv-lae"]["hit_rate"], "pbkv-he": {}}
                for e in NOISES:
                    opts = BenchOptions(gpu_blocks=blocks, train_fraction=0.25,
                                        policy_options={"pbkv-he": {"predictor_noise": e}})
                    row["pbkv-he"][e] = run_bench(src, ["pbkv-he"], opts)["results"]["pbkv-he"]["hit_rate"]
                    print(f"{blocks} blocks, noise {e}: pbkv-he {100 * row['pbkv-he'][e]:.1f}% "
                          f"(lae {100 * row['pbkv-lae']:.1f}%, lru {100 * row['lru']:.1f}%)", flush=True)
    res.mkdir(parents=True, exist_ok=True)
    (res / "sweeps.json").write_text(json.dumps(out, indent=1))
    plot(out)


def _style(name: str) -> dict:
    color, marker, ls = STYLES.get(name, (None, "o", "-"))
    return {"color": color, "marker": marker, "linestyle": ls, "markersize": 6, "linewidth": 1.6,
            "markerfacecolor": "none" if name in ("belady", "pbkv-he", "oracle") else color}


def pressure_figure(out: dict):
    """Hit rate against GPU capacity, one line per policy (None without pressure points)."""
    import matplotlib.pyplot as plt
    caps = sorted(out["pressure"], key=int)
    if not caps:
        return None
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    names = [p for p in SWEEP_POLICIES if all(p in out["pressure"][c] for c in caps)]
    for p in names:
        ax.plot([int(c) for c in caps], [100 * out["pressure"][c][p] for c in caps], label=p, **_style(p))
    ax.set_xscale("log")
    ax.set_xticks([int(c) for c in caps], [f"{int(c):,}" for c in caps], fontsize=8)
    ax.minorticks_off()
    ax.set_ylim(0, 100)
    ax.set_xlabel("GPU KV capacity (blocks of 16 tokens, log scale)")
    ax.set_ylabel("GPU token hit rate (%)")
    ax.set_title(f"Pressure sweep: {out['workload']}, {out['workflows']} workflows, "
                 f"{out.get('concurrency', CONCURRENCY)} at once", fontsize=10)
    ax.legend(fontsize=8, ncol=2)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def noise_figure(out: dict):
    """PBKV-HE's hit rate against predictor noise, one panel per capacity, axes shared (None
    without noise points)."""
    import matplotlib.pyplot as plt
    rows = sorted(out["noise"], key=int, reverse=True)
    if not rows:
        return None
    fig, axes = plt.subplots(1, len(rows), figsize=(6 * len(rows), 4.5), squeeze=False,
                             sharex=True, sharey=True)
    for ax, blocks in zip(axes[0], rows):
        n = out["noise"][blocks]
        es = sorted(n["pbkv-he"], key=float)
        ax.plot([float(e) for e in es], [100 * n["pbkv-he"][e] for e in es], label="pbkv-he",
                **_style("pbkv-he"))
        for p in ("pbkv-lae", "lru"):
            color, _, ls = STYLES[p]
            ax.axhline(100 * n[p], color=color, linestyle=ls, linewidth=1.4,
                       label=f"{p} ({100 * n[p]:.1f}%)")
        ax.set_xlabel("predictor noise E (0: trained predictor, 1: random)")
        ax.set_title(f"Robustness: {out['workload']}, {int(blocks):,} GPU blocks", fontsize=10)
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("GPU token hit rate (%)")
    axes[0][0].set_ylim(0, None)
    fig.tight_layout()
    return fig


def plot(out: dict, figs: Path | None = None) -> list[Path]:
    """Draw both sweep figures from a sweeps.json document into `figs` (docs/figures)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figs = figs or REPO / "docs" / "figures"
    figs.mkdir(parents=True, exist_ok=True)
    written = []
    for name, make in (("pressure_sweep.png", pressure_figure), ("noise_sweep.png", noise_figure)):
        fig = make(out)
        if fig is not None:
            fig.savefig(figs / name, dpi=120)
            plt.close(fig)
            written.append(figs / name)
    return written


if __name__ == "__main__":
    main()

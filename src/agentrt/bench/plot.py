"""The bench figure: hit rates against LRU and the bounds, and latencies that show differences.

Top: each policy's token hit rate as a bar, GPU hits and host-tier hits stacked, labelled with
their values; LRU and the bounds (oracle, belady, infinite) as horizontal reference lines (bars
only when nothing but bounds ran). Bottom: one panel per latency metric (TTFT mean, p90, p99,
TPOT mean when recorded, E2E mean), each on its own zero-based axis, every bar labelled with its
value and its change against LRU, so a 3% difference in seconds-long E2E is read, not guessed.
The title is the run's settings (report.run_summary). Saved as whatever the suffix says
(png, pdf, svg, ...).
"""

from __future__ import annotations

from pathlib import Path

from agentrt.bench.report import run_summary
from agentrt.errors import AgentrtError

GPU_COLOR, HOST_COLOR, LAT_COLOR = "#3b6ea8", "#8fb8de", "#c8553d"
BOUND_STYLES = {"lru": ("#333333", "-"), "oracle": ("#2a9d8f", "--"), "belady": ("#7b2cbf", "-."),
                "belady-held": ("#c77dff", "-."),
                "infinite": ("#999999", ":")}
LATENCIES = [("ttft_mean_s", "TTFT mean"), ("ttft_p90_s", "TTFT p90"), ("ttft_p99_s", "TTFT p99"),
             ("tpot_mean_s", "TPOT mean"), ("e2e_mean_s", "E2E workflow mean")]
IN_MS = {"tpot_mean_s"}      # per-token times read in milliseconds


def image_suffixes() -> tuple[str, ...]:
    """File suffixes matplotlib can write (".png", ".pdf", ...)."""
    from matplotlib.backend_bases import FigureCanvasBase
    return tuple(sorted("." + s for s in FigureCanvasBase.get_supported_filetypes()))


def _lru_rate(doc: dict) -> float | None:
    r = doc["results"].get("lru") or doc.get("lru_reference")
    return r["hit_rate"] if r else None


def _hit_panel(ax, doc: dict) -> None:
    res = doc["results"]
    bars = [n for n, r in res.items() if not r.get("bound")] or list(res)
    gpu = [100 * res[n]["hit_rate"] for n in bars]
    host = [100 * (res[n].get("host_hit_rate") or 0.0) for n in bars]
    ax.bar(bars, gpu, width=0.6, color=GPU_COLOR, label="GPU hit")
    top = ax.bar(bars, host, width=0.6, bottom=gpu, color=HOST_COLOR, label="host-tier hit")
    ax.bar_label(top, labels=[f"{g + h:.1f}%" + (f"\n({h:.1f}% host)" if h >= 0.05 else "")
                              for g, h in zip(gpu, host)], fontsize=8, padding=2)
    lines = [("lru", _lru_rate(doc))] + [(b, res[b]["hit_rate"]) for b in ("oracle", "belady-held", "belady", "infinite")
                                         if b in res and b not in bars]
    for name, rate in lines:
        if rate is None:
            continue
        color, style = BOUND_STYLES[name]
        what = "LRU, GPU hit" if name == "lru" else f"{name} bound, GPU hit"
        ax.axhline(100 * rate, color=color, linestyle=style, linewidth=1.2,
                   label=f"{what}: {100 * rate:.1f}%")
    peak = max([g + h for g, h in zip(gpu, host)] + [100 * r for _, r in lines if r is not None])
    ax.set_ylim(0, min(100.0, peak * 1.18 + 2))
    ax.set_ylabel("token hit rate (% of prompt tokens)")
    ax.set_title("Hit rate: GPU + host tier, against LRU and the bounds", fontsize=10)
    ax.legend(loc="upper left", fontsize=7, ncol=3, framealpha=0.9)
    ax.tick_params(axis="x", rotation=20, labelsize=8)


def _change(v: float, ref: float) -> str:
    d = 100 * (v / ref - 1)
    return "+0.0%" if abs(d) < 0.05 else f"{d:+.1f}%"


def _latency_panels(fig, grid, doc: dict) -> None:
    res = doc["results"]
    timed = [n for n, r in res.items() if r.get("ttft_mean_s") is not None]
    metrics = [(k, t) for k, t in LATENCIES if any(res[n].get(k) is not None for n in timed)]
    if not timed or not metrics:
        return
    base = res.get("lru")
    first = None
    for i, (key, title) in enumerate(metrics):
        ax = fig.add_subplot(grid[1, i], sharey=first)   # one y axis (the policies); x per panel
        first = first or ax
        k = 1000.0 if key in IN_MS else 1.0
        vals = [k * (res[n].get(key) or 0.0) for n in timed]
        bars = ax.barh(timed, vals, color=LAT_COLOR)
        ref = k * base[key] if base and base.get(key) else None
        labels = [(f"{v:.3f}" if v < 10 else f"{v:.1f}")
                  + (f" ({_change(v, ref)})" if ref and n != "lru" else "") for n, v in zip(timed, vals)]
        ax.bar_label(bars, labels=labels, fontsize=7, padding=2)
        ax.set_xlim(0, max(vals) * 1.7 if max(vals) > 0 else 1)
        ax.set_title(f"{title} ({'ms' if k > 1 else 's'}{'; change vs LRU' if ref else ''})", fontsize=9)
        ax.tick_params(labelsize=7)
        if i:
            ax.tick_params(axis="y", labelleft=False)
    first.invert_yaxis()


def build_figure(doc: dict):
    """The figure (matplotlib, Agg backend), not saved."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    res = doc["results"]
    n_lat = sum(1 for k, _ in LATENCIES if any(r.get(k) is not None for r in res.values()))
    cols = max(n_lat, 1)
    fig = plt.figure(figsize=(max(11, 3.2 * cols), 8.5 if n_lat else 5), layout="constrained")
    grid = fig.add_gridspec(2 if n_lat else 1, cols, height_ratios=[1.3, 1] if n_lat else None)
    _hit_panel(fig.add_subplot(grid[0, :]), doc)
    if n_lat:
        _latency_panels(fig, grid, doc)
    fig.suptitle("\n".join(run_summary(doc)), fontsize=8, x=0.01, ha="left")
    return fig


def plot_result(doc: dict, path: str | Path) -> None:
    fig = build_figure(doc)
    import matplotlib.pyplot as plt
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=120)
    except (OSError, ValueError) as e:
        raise AgentrtError(f"cannot write plot {path}: {e}") from None
    finally:
        plt.close(fig)

"""Show a bench result: a rich table (bounds beside the policies) and an optional PNG plot."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table


def _fmt(v, kind: str) -> str:
    if v is None:
        return "-"
    if kind == "pct":
        return f"{100 * v:.1f}%"
    if kind == "s":
        return f"{v:.3f}"
    if kind == "int":
        return f"{int(v):,}"
    return f"{v:,.0f}"


def gap_target(res: dict) -> tuple[str | None, float | None]:
    """The bound "gap closed" is measured against: the in-simulator oracle, else (labelled) belady."""
    for name in ("oracle", "belady"):
        if name in res:
            return name, res[name]["hit_rate"]
    return None, None


def result_table(doc: dict) -> Table:
    res = doc["results"]
    lru = res.get("lru", doc.get("lru_reference") or {}).get("hit_rate")
    target, bel = gap_target(res)
    cfg = doc["config"]
    t = Table(title=f"{doc['trace']}: {doc['calls']:,} calls, {doc['workflows']:,} workflows, "
                    f"{cfg['gpu_blocks']:,} GPU blocks x {cfg['block_size']} tokens"
                    + (f", {cfg['host_blocks']:,} host blocks" if cfg.get("host_blocks") else "")
                    + f", {cfg['preset']}"
                    + (f", scheduler {cfg['scheduler']}" if cfg.get("scheduler", "fcfs") != "fcfs" else ""))
    cols = [("policy", "left"), ("hit rate", "right"), ("host hit", "right"),
            ("prefill tok", "right"), ("TTFT mean s", "right"), ("TTFT p99 s", "right"),
            ("E2E mean s", "right"), ("E2E p99 s", "right"), ("tok/s", "right")]
    if lru is not None and bel is not None and bel > lru:
        cols.append((f"gap closed (vs {target})", "right"))
    for name, justify in cols:
        t.add_column(name, justify=justify)
    for name, r in res.items():
        label = " (offline bound)" if r.get("offline") else " (bound)" if r.get("bound") else ""
        row = [name + label, _fmt(r["hit_rate"], "pct"),
               _fmt(r["host_hit_rate"], "pct"), _fmt(r["prefill_tokens"], "int"),
               _fmt(r["ttft_mean_s"], "s"), _fmt(r["ttft_p99_s"], "s"), _fmt(r["e2e_mean_s"], "s"),
               _fmt(r["e2e_p99_s"], "s"), _fmt(r["throughput_tok_s"], "n")]
        if len(cols) > 9:
            row.append("-" if r.get("bound") else f"{100 * (r['hit_rate'] - lru) / (bel - lru):.0f}%")
        t.add_row(*row)
    return t


def print_result(doc: dict, console: Console | None = None) -> None:
    console = console or Console()
    console.print(result_table(doc))
    if "belady" in doc["results"]:
        console.print("belady is offline: it ignores the GPU memory running requests hold, so no "
                      "engine can reach it; oracle is clairvoyant under the simulator's own accounting.")


def plot_result(doc: dict, path: str | Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    res = doc["results"]
    names = list(res)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    colors = ["#999999" if res[n].get("bound") else "#3b6ea8" for n in names]
    axes[0].bar(names, [100 * res[n]["hit_rate"] for n in names], color=colors)
    axes[0].set_ylabel("GPU token hit rate (%)")
    axes[0].set_title("Hit rate (grey: bounds)")
    if "oracle" in res:
        axes[0].axhline(100 * res["oracle"]["hit_rate"], color="#555555", linestyle="--", linewidth=1,
                        label="oracle (reachable bound)")
        axes[0].legend(loc="lower right", fontsize=8)
    timed = [n for n in names if res[n]["ttft_mean_s"] is not None]
    axes[1].bar(timed, [res[n]["ttft_mean_s"] for n in timed], color="#c8553d")
    axes[1].set_ylabel("mean TTFT (s)")
    axes[1].set_title("Time to first token")
    for ax in axes:
        ax.tick_params(axis="x", rotation=30)
    fig.suptitle(doc["trace"], fontsize=9)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)

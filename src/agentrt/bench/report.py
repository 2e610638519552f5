"""Show a bench result: a rich table (bounds beside the policies) headed by the run's settings.

On screen hit rates are percentages and times seconds (the JSON and CSV keep fractions,
bench/output.py). The header states what the numbers depend on: the load (closed-loop
concurrency or open-loop arrivals), the capacity (GPU and host blocks), the preset and the
training split. Tables are never cut to the terminal: a narrow terminal (or a pipe) gets lines as
wide as the table needs (`print_wide`). The figure is in bench/plot.py.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console, RenderableType
from rich.measure import Measurement
from rich.table import Table


def _fmt(v, kind: str) -> str:
    if v is None:
        return "-"
    if kind == "pct":
        return f"{100 * v:.1f}%"
    if kind == "s":
        return f"{v:.3f}"
    if kind == "ms":
        return f"{1000 * v:.1f}"
    if kind == "int":
        return f"{int(v):,}"
    if kind == "x":
        return f"{v:.2f}"
    return f"{v:,.0f}"


def gap_target(res: dict) -> tuple[str | None, float | None]:
    """The bound "gap closed" is measured against: the in-simulator oracle, else (labelled) belady."""
    for name in ("oracle", "belady-held", "belady"):
        if name in res:
            return name, res[name]["hit_rate"]
    return None, None


def load_text(cfg: dict) -> str:
    conc = cfg.get("concurrency")
    scale = cfg.get("time_scale", 1.0) or 1.0
    stretch = f", times x{scale:g}" if scale != 1.0 else ""
    if conc:
        # a closed loop stretches only release timestamps of later calls, if the trace has any
        return f"closed loop, {conc:,} workflows at once{stretch + ' (timestamps only)' if stretch else ''}"
    return f"open loop, the trace's arrival times{stretch}"


def capacity_text(cfg: dict) -> str:
    host = cfg.get("host_blocks") or 0
    reps = cfg.get("replicas") or 1
    per = f"{reps} replicas behind the {cfg.get('router')} router, each " if reps > 1 else ""
    return (f"{per}{cfg['gpu_blocks']:,} GPU blocks x {cfg['block_size']} tokens, "
            + (f"{host:,} host blocks" if host else "no host tier")
            + (f", peer KV transfer at {cfg['transfer_gbps']:g} GB/s" if cfg.get("transfer_gbps") else ""))


def split_text(cfg: dict) -> str:
    train = cfg.get("train")
    if train and train.get("untrained"):
        return f"none held back: {', '.join(train['untrained'])} run untrained"
    if not train:
        return "none (no policy learns offline)"
    if cfg.get("train_path"):
        text = f"offline learners train on {cfg['train_path']}"
        if train.get("workflows"):
            text += f", the first {train['workflows']:,} workflows of the trace held back"
    else:
        text = f"{train['source']} held back, every policy scored on the rest"
    return text + (f" ({train['note']})" if train.get("note") else "")


def run_summary(doc: dict) -> list[str]:
    """The run in three lines: what was replayed; load, capacity, preset; training split."""
    cfg = doc["config"]
    sched = cfg.get("scheduler", "fcfs")
    hints = cfg.get("tool_hints")
    return [f"{doc['trace']}: {doc['calls']:,} calls, {doc['workflows']:,} workflows scored",
            f"load: {load_text(cfg)} | capacity: {capacity_text(cfg)} | preset: {cfg['preset']}",
            f"training split: {split_text(cfg)}" + (f" | scheduler {sched}" if sched != "fcfs" else "")
            + (f" | tool times announced, lognormal error {hints:g}" if hints is not None else "")
            + (f" | kv.retain over tool calls, lognormal error {cfg['retain_hints']:g}, budget "
               f"{cfg.get('retain_budget', 0.25):g}" if cfg.get("retain_hints") is not None else "")
            + (" | blocks shared when scheduled (vLLM)" if cfg.get("cache_at") == "schedule" else "")
            + (f" | oracle: clairvoyant eviction on the {cfg.get('oracle_reference') or 'lru'} run's placement "
               "(not a bound on routing)" if (cfg.get("replicas") or 1) > 1 and "oracle" in doc["results"] else "")]


# (header, result key, format); TPOT only when the engine recorded it
COLUMNS = [("hit rate", "hit_rate", "pct"), ("host hit", "host_hit_rate", "pct"),
           ("peer hit", "remote_hit_rate", "pct"),
           ("prefill tok", "prefill_tokens", "int"), ("TTFT mean s", "ttft_mean_s", "s"),
           ("TTFT p50 s", "ttft_p50_s", "s"), ("TTFT p90 s", "ttft_p90_s", "s"),
           ("TTFT p99 s", "ttft_p99_s", "s"), ("TPOT mean ms", "tpot_mean_s", "ms"),
           ("TPOT p99 ms", "tpot_p99_s", "ms"), ("E2E mean s", "e2e_mean_s", "s"),
           ("E2E p99 s", "e2e_p99_s", "s"), ("tok/s", "throughput_tok_s", "n"),
           ("imbalance", "imbalance", "x")]


# shown only when some result has them: TPOT (when recorded), imbalance (multi-replica runs),
# peer hits (multi-replica runs with peer transfer)
OPTIONAL = {"tpot_mean_s", "tpot_p99_s", "imbalance", "remote_hit_rate"}


def bound_label(name: str, row: dict, doc: dict) -> str:
    """A bound's mark in tables. With a host tier the in-simulator `oracle` is not a bound on GPU
    hits: what the host holds and loads back depends on each policy's own evictions and
    prefetches, and a policy can beat it (gaia with a host tier: PBKV-TA 32.8% against 32.3%), so
    it is marked a reference there."""
    if row.get("offline"):
        return " (offline bound)"
    if not row.get("bound"):
        return ""
    if name == "oracle" and (doc.get("config") or {}).get("host_blocks"):
        return " (reference)"
    return " (bound)"


def result_table(doc: dict) -> Table:
    res = doc["results"]
    lru = res.get("lru", doc.get("lru_reference") or {}).get("hit_rate")
    target, bel = gap_target(res)
    t = Table(title="\n".join(run_summary(doc)), title_justify="left")
    cols = [c for c in COLUMNS if c[1] not in OPTIONAL
            or any(r.get(c[1]) for r in res.values())]
    gap = lru is not None and bel is not None and bel > lru
    t.add_column("policy", no_wrap=True)
    for head, _, _ in cols:
        t.add_column(head, justify="right", no_wrap=True)
    if gap:
        t.add_column(f"gap closed (vs {target})", justify="right", no_wrap=True)
    for name, r in res.items():
        row = [name + bound_label(name, r, doc)] + [_fmt(r.get(key), kind) for _, key, kind in cols]
        if gap:
            row.append("-" if r.get("bound") else f"{100 * (r['hit_rate'] - lru) / (bel - lru):.0f}%")
        t.add_row(*row)
    return t


def print_wide(console: Console, renderable: RenderableType) -> None:
    """Print without cutting: when the console is narrower than the renderable's natural width,
    print it that wide (a terminal then wraps the lines, digits intact)."""
    need = Measurement.get(console, console.options.update_width(10_000), renderable).maximum
    old = console.width
    if need <= old:
        console.print(renderable)
        return
    console.width = need
    try:
        console.print(renderable)
    finally:
        console.width = old


def print_result(doc: dict, console: Console | None = None) -> None:
    console = console or Console()
    print_wide(console, result_table(doc))
    res = doc["results"]
    if "belady" in res or "belady-held" in res or "oracle" in res:
        parts = []
        if "belady" in res:
            parts.append("belady is offline: it ignores the GPU memory running requests hold, so no "
                         "engine can reach it")
        if "belady-held" in res:
            parts.append("belady-held is offline too, but keeps the blocks the LRU replay's running "
                         "calls held, so it is the tighter bound")
        if ("belady" in res or "belady-held" in res) and (doc["config"].get("replicas") or 1) > 1:
            parts.append("on several replicas the offline bounds pool the replicas' memory over the "
                         "LRU run's block stream, so they bound routing and eviction together")
        if "oracle" in res:
            parts.append("oracle is clairvoyant under the simulator's own accounting")
        if doc["config"].get("host_blocks"):
            parts.append("with a host tier the offline bounds are the GPU tier's: they maximise GPU "
                         "hits, not GPU plus host hits, so a policy's total (or its prefill tokens) "
                         "can beat them, and \"gap closed\" counts GPU hits only; oracle is a "
                         "reference there, not a bound (a policy's prefetches can beat its GPU hits)")
        console.print("; ".join(parts) + ".")
    if doc.get("overload"):
        from agentrt.bench.overload import overload_text
        console.print(overload_text(doc["overload"]), style="bold yellow")
    if (note := oversize_text(doc)) is not None:
        console.print(note, style="bold yellow")
    for note in (no_pressure_text(doc), one_tenant_text(doc)):
        if note is not None:
            console.print(note, style="bold yellow")
    if (note := net_text(doc)) is not None:
        console.print(note)


def no_pressure_text(doc: dict) -> str | None:
    """A note when every policy run gives the same hit rate and prefill: at this capacity the
    eviction order decides nothing (a newcomer's most common surprise: a generated workload on a
    whole GPU's memory)."""
    res = [r for r in doc["results"].values() if not r.get("offline")]
    if len(res) < 2 or len({(r.get("hit_rate"), r.get("prefill_tokens")) for r in res}) > 1:
        return None
    cfg = doc["config"]
    from agentrt import defaults
    what = ("no policy evicted a block" if not any(r.get("evictions") for r in res)
            else "the evictions cost every policy the same hits")
    return (f"every policy ties: at {cfg['gpu_blocks']:,} GPU blocks {what}, so eviction order decides "
            f"nothing on this run; give a smaller --gpu-blocks (the default run uses "
            f"{defaults.RUN_GPU_BLOCKS:,}, a quarter of the preset's memory) or more --concurrency to compare them.")


def one_tenant_text(doc: dict) -> str | None:
    """A note when a scheduler that shares by tenant ran on a trace with one tenant."""
    cfg = doc["config"]
    if cfg.get("scheduler") != "fair":
        return None
    first = next(iter(doc["results"].values()), {})
    if len(first.get("tenants") or {}) > 1:
        return None
    return ("one tenant: the fair scheduler shares prefill, running memory and the KV pool by tenant, "
            "and this trace has a single tenant, so it orders calls as fcfs does.")


def net_text(doc: dict) -> str | None:
    """Which policies the LRU safety net held in LRU order, and for how long (None: none)."""
    held = [(p, r["safety_net"]) for p, r in doc["results"].items()
            if (r.get("safety_net") or {}).get("fallbacks")]
    if not held:
        return None
    parts = [f"{p} for {net['fallback_share']:.0%} of the run ({net['fallbacks']} time"
             f"{'s' if net['fallbacks'] > 1 else ''})" for p, net in held]
    return ("LRU safety net: LRU order while the policy measurably lost to LRU on the same calls: "
            + "; ".join(parts) + " (--no-safety-net: each policy's own order throughout).")


def oversize_text(doc: dict) -> str | None:
    """A note when calls need more KV blocks than the whole GPU pool: the simulator serves them
    outside its memory accounting (engine.md), so their latencies are optimistic."""
    from agentrt.bench.overload import reference_result
    found = reference_result(doc)
    ref = found[1] if found is not None else {}
    n = ref.get("oversize_calls") or 0
    if not n:
        return None
    cfg = doc["config"]
    return (f"{n:,} of {ref['calls']:,} calls ({n / max(1, ref['calls']):.0%}) need more KV blocks than "
            f"the GPU pool's {cfg['gpu_blocks']:,}: the simulator serves them without the cache and "
            f"outside its memory accounting (a real engine refuses them), so latencies at this "
            f"capacity are optimistic; raise --gpu-blocks for figures that hold.")


def plot_result(doc: dict, path: str | Path) -> None:
    """Write the bench figure (bench/plot.py) to `path`."""
    from agentrt.bench.plot import plot_result as _plot
    _plot(doc, path)

"""Goodput for benchmarks/schedulers.py: the highest arrival rate at which a scheduler +
eviction pair keeps p90 TTFT within the SLO, on a grid around FCFS + LRU's sustainable rate, then
refined by bisection (`refine_goodput`), and with clairvoyant eviction (`oracle_goodput`).

Assumes p90 TTFT rises with the rate, which the grid only samples."""

from __future__ import annotations

from pathlib import Path

from benchmarks.sched_runs import GOODPUT_GRID, SCHEDULERS, bench, generate


def goodput_part(workload: str, n: int, mu: float, slo: float, tmp: Path, log) -> dict:
    grid = []
    for f in GOODPUT_GRID:
        gpath, gcmd = generate(workload, f * mu, n, tmp)
        pt: dict = {"rate": f * mu, "generate": gcmd, "p90": {}}
        for s in SCHEDULERS:
            pols = ["lru", "pbkv-ta"] if s == "agent" else ["lru"]
            doc, _ = bench(gpath, pols, s, tmp)
            for p in pols:
                pt["p90"][f"{s}+{p}"] = doc["results"][p]["ttft_p90_s"]
        grid.append(pt)
        log(f"  {workload} goodput grid {f:.2f}x: " + " ".join(f"{k} {v:.2f}s" for k, v in pt["p90"].items()))
    pairs = list(grid[0]["p90"])
    good = {k: max([pt["rate"] for pt in grid if pt["p90"][k] <= slo], default=0.0) for k in pairs}
    return {"grid": grid, "goodput": good}


class RateProbe:
    """One pair's p90 TTFT at a rate, against the SLO: each probe generates the workload at that
    rate and benches the pair; every probe is kept as [rate, p90], with the last bench command."""

    def __init__(self, workload: str, n: int, scheduler: str, policy: str, slo: float, tmp: Path) -> None:
        self.workload, self.n, self.scheduler, self.policy = workload, n, scheduler, policy
        self.slo, self.tmp = slo, tmp
        self.probes: list = []
        self.command: str | None = None

    def __call__(self, rate: float) -> bool:
        path, _ = generate(self.workload, rate, self.n, self.tmp)
        doc, self.command = bench(path, [self.policy], self.scheduler, self.tmp)
        p90 = doc["results"][self.policy]["ttft_p90_s"]
        self.probes.append([rate, p90])
        return p90 <= self.slo

    def scan_up(self, lo: float, rates: list[float]) -> tuple[float, float | None]:
        """From a passing `lo` through `rates` (ascending) to the first that fails: (the last
        passing rate, that one, or None if every one passed)."""
        for r in rates:
            if not self(r):
                return lo, r
            lo = r
        return lo, None

    def bisect(self, lo: float, hi: float, steps: int) -> float:
        for _ in range(steps):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if self(mid) else (lo, mid)
        return lo

    def shown(self) -> str:
        return ", ".join(f"{r:.5f}: {t:.2f}s" for r, t in self.probes)


def past_top(rates: list[float]) -> list[float]:
    """Rates past the grid's top in steps of 1.15x, for pairs that still meet the SLO there."""
    return [rates[-1] * 1.15 ** k for k in range(1, 7)]


def refine_goodput(workload: str, d: dict, slo: float, tmp: Path, log, steps: int = 4) -> dict:
    """FCFS + LRU's and the best pairs' goodput, refined by bisection between the grid's highest
    passing rate and the next rate of the grid, or the first failing rate past the grid's top in
    steps of 1.15x (`steps` probes; assumes p90 TTFT rises with the rate, which the grid only
    samples)."""
    good, n = d["goodput"], d["workflows"]
    rates = sorted(pt["rate"] for pt in d["goodput_grid"])
    best = max(good.values())
    out: dict = {}
    for k in ["fcfs+lru"] + [k for k, v in good.items() if v == best and k != "fcfs+lru"]:
        lo = good[k]
        if lo <= 0:
            out[k] = {"rate": lo, "probes": [], "command": None}
            continue
        probe = RateProbe(workload, n, *k.split("+"), slo, tmp)
        hi = min((r for r in rates if r > lo), default=None)
        if hi is None:      # it passes at the grid's top: go past it, as `oracle_goodput` does
            lo, hi = probe.scan_up(lo, past_top(rates))
        if hi is not None:
            lo = probe.bisect(lo, hi, steps)
        out[k] = {"rate": lo, "probes": probe.probes, "command": probe.command}
        log(f"  {workload} goodput of {k} refined: {lo:.5f}/s ({probe.shown()})")
    return out


def oracle_goodput(workload: str, d: dict, slo: float, tmp: Path, log, steps: int = 4) -> dict:
    """Goodput with clairvoyant eviction (`oracle`) under FCFS and under `agent`: the grid scanned
    from FCFS + LRU's grid goodput (up while the SLO holds, past the grid's top in steps of 1.15x
    if need be; down while it does not), then `steps` bisection probes, as `refine_goodput` does."""
    n = d["workflows"]
    rates = sorted(pt["rate"] for pt in d["goodput_grid"])
    start = d["goodput"].get("fcfs+lru") or rates[0]
    i = rates.index(start) if start in rates else 0
    out: dict = {}
    for sched in ("fcfs", "agent"):
        probe = RateProbe(workload, n, sched, "oracle", slo, tmp)
        lo = hi = None
        if probe(rates[i]):
            lo, hi = probe.scan_up(rates[i], rates[i + 1:] + past_top(rates))
        else:
            hi = rates[i]
            for r in reversed(rates[:i]):
                if probe(r):
                    lo = r
                    break
                hi = r
        if lo is not None and hi is not None:
            lo = probe.bisect(lo, hi, steps)
        out[f"{sched}+oracle"] = {"rate": lo or 0.0, "probes": probe.probes, "command": probe.command}
        log(f"  {workload} goodput of {sched}+oracle: {lo or 0.0:.5f}/s ({probe.shown()})")
    return out

"""Bounded runtime state: memory and loop costs under 100,000 workflows that never end.

Opens `--workflows` workflows (one call each, arrived and finished, never ended: a framework
that never says) through an `AgentRuntime` with its default caps, one tenant or several, and
prints
- memory: Python heap (tracemalloc) per workflow up to the cap, then over two equal stretches
  after it (target: flat; the first stretch after the cap also holds the tables' one-time
  growth from churn, as a dict resizes once for its deleted entries);
- the silence sweep: one timer sweep with nothing silent, and one that ends 1,000 workflows;
- the admission schedulers' memory after `--scheduler-tenants` tenants came and went (one call
  each);
- CacheSage's idle loop (`act`) and its survival refresh after one event, at the open count the
  caps allow and with the caps off (every workflow open), against the full scan over every idle
  workflow that the previous code ran (`act` once per interval when the engine is idle).
Time is passed in (1 ms between workflows), so nothing goes silent during the run.

    python -m benchmarks.runtime_state [--workflows 100000] [--tenants 1] [--policy cachesage]
"""

from __future__ import annotations

import argparse
import gc
import time
import tracemalloc

from agentrt.policies.registry import make_policy
from agentrt.policies.transitions import END
from agentrt.runtime import events as ev
from agentrt.runtime.runtime import AgentRuntime

BS = 16
AGENTS = ("plan", "code", "test", "review")


class View:
    idle = True
    block_size = BS

    def gpu_prefix(self, tenant, ids):
        return 0


def _anchor(agent: str) -> list[int]:
    base = 1000 * (AGENTS.index(agent) + 1)
    return list(range(base, base + 16))          # a 256-token system prompt


def open_workflows(rt: AgentRuntime, n: int, tenants: int, t0: float = 0.0, marks=(),
                   prefix: str = "w") -> dict:
    """`n` one-call workflows that never end; heap size at the given marks."""
    out = {}
    for i in range(n):
        agent = AGENTS[i % len(AGENTS)]
        info = ev.CallInfo(rid=i + 1, workflow=f"{prefix}{i}", agent=agent, tenant=f"t{i % tenants}",
                           index=0, hash_ids=_anchor(agent) + [10**6 + i, 10**6 + i + 1],
                           input_length=18 * BS, output_length=8, block_size=BS)
        now = t0 + i * 1e-3
        rt.observe(ev.CallArrived(now, info))
        rt.observe(ev.CallFinished(now + 5e-4, info, None))
        if i + 1 in marks:
            gc.collect()
            out[i + 1] = tracemalloc.get_traced_memory()[0]
    return out


def train(rt: AgentRuntime) -> None:
    """A few finished plan -> code -> test -> review workflows: transitions and anchors learned."""
    rid = 10**8
    for k in range(4):
        for j, agent in enumerate(AGENTS):
            rid += 1
            info = ev.CallInfo(rid=rid, workflow=f"train{k}", agent=agent, tenant="t0", index=j,
                               hash_ids=_anchor(agent) + [rid], input_length=17 * BS,
                               output_length=8, block_size=BS)
            rt.observe(ev.CallArrived(-100.0 + k, info))
            rt.observe(ev.CallFinished(-99.5 + k, info, None))
        rt.observe(ev.WorkflowEnded(-99.0 + k, f"train{k}", "t0"))


def full_scan_act(p) -> int:
    """The idle loop as the previous code ran it: every idle workflow, each interval."""
    rt = p.runtime
    for wf in rt.between_calls.values():
        if wf.running or not wf.path:
            continue
        probs = p.learner.next_probs((wf.tenant, wf.path[-1]))
        if not probs:
            continue
        nxt, q = max(probs.items(), key=lambda kv: (kv[1], str(kv[0])))
        if nxt == END or q < p.warmup_min_prob or nxt in p._warming:
            continue
        prof = rt.profile(*nxt)
        if prof is None or prof.anchor_workflows < 2 or not prof.anchor:
            continue
    return 0


def full_scan_survival(p) -> None:
    """The survival refresh as the previous code ran it: a bounded BFS per live workflow."""
    keep: dict = {}
    for wf in p.runtime.workflows.values():
        if not wf.path or wf.ended:
            continue
        for a, (_, q) in p.learner.reach((wf.tenant, wf.path[-1]), p.lookahead).items():
            keep[a] = keep.get(a, 1.0) * (1.0 - q)


def best_of(fn, repeat: int = 5) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def memory_run(policy: str, n: int, tenants: int, caps: bool) -> None:
    kw = {} if caps else {"max_workflows": None, "max_workflows_per_tenant": None}
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    rt = AgentRuntime(make_policy(policy), **kw)
    cap = min(rt.max_workflows or n, (rt.max_workflows_per_tenant or n) * tenants, n)
    if cap == n:                      # no cap reached: compare the first and second halves
        cap = n // 2
    mid = cap + (n - cap) // 2
    mem = open_workflows(rt, n, tenants, marks=(cap, mid, n))
    tracemalloc.stop()
    label = "default caps" if caps else "no caps"
    before = (mem[cap] - base) / cap
    after1 = (mem[mid] - mem[cap]) / max(1, mid - cap)
    after2 = (mem[n] - mem[mid]) / max(1, n - mid)
    print(f"  {policy:10s} {label:12s} tenants={tenants:<3d} open={len(rt.workflows):>7,d} "
          f"forced_ends={rt.forced_ends:>6,d}  heap {(mem[n] - base) / 2**20:6.1f} MiB  "
          f"B/workflow: first {cap:,}: {before:5.0f}, next {mid - cap:,}: {after1:6.1f}, "
          f"last {n - mid:,}: {after2:6.1f}")


def cost_run(n: int, tenants: int, caps: bool) -> None:
    kw = {} if caps else {"max_workflows": None, "max_workflows_per_tenant": None}
    p = make_policy("cachesage")
    rt = AgentRuntime(p, **kw)
    train(rt)
    open_workflows(rt, n, tenants)
    now = n * 1e-3 + 1.0
    open_n = len(rt.workflows)
    # sweep: nothing silent (the usual timer tick), then one that ends the 1,000 oldest
    t_idle = best_of(lambda: rt.sweep(now))
    oldest = next(iter(rt.between_calls.values())).last_seen
    t = time.perf_counter()
    ended = rt.sweep(oldest + rt.silent_after_s + 0.9995)   # workflows are 1 ms apart
    t_sweep = time.perf_counter() - t
    # CacheSage: one event, then the survival refresh; the idle loop
    info = ev.CallInfo(rid=10**9, workflow="w5", agent="code", tenant="t0", index=1,
                       hash_ids=_anchor("code") + [7], input_length=17 * BS, output_length=8,
                       block_size=BS)
    rt.observe(ev.CallArrived(now, info))
    t = time.perf_counter()
    p.survival("t0", "test")
    t_surv = time.perf_counter() - t
    p._warming.clear()
    t_act = best_of(lambda: (p._warming.clear(), p.act(now, View())))
    t_act_old = best_of(lambda: full_scan_act(p), 3)
    t_surv_old = best_of(lambda: full_scan_survival(p), 3)
    label = "default caps" if caps else "no caps"
    print(f"  {label:12s} open={open_n:>7,d}  sweep (nothing silent) {t_idle * 1e6:7.1f} us  "
          f"sweep ending {ended:,d}: {t_sweep * 1e3:6.2f} ms  |  cachesage act {t_act * 1e6:7.1f} us "
          f"(full scan {t_act_old * 1e3:7.1f} ms)  survival refresh {t_surv * 1e6:7.1f} us "
          f"(full scan {t_surv_old * 1e3:7.1f} ms)")


def scheduler_run(name: str, n: int) -> None:
    """`n` tenants one after another, each one workflow of one call (arrived, admitted, finished,
    ended): what the scheduler keeps once they are gone (a server whose clients name tenants)."""
    from agentrt.sched.registry import make_scheduler
    sched = make_scheduler(name)
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    for i in range(n):
        c = ev.CallInfo(rid=i, workflow=f"w{i}", agent="a", tenant=f"t{i}", index=0,
                        hash_ids=[4 * i + k for k in range(4)], input_length=4 * BS, output_length=8,
                        block_size=BS, warmup=False)
        sched.observe(ev.CallArrived(float(i), c))
        sched.observe(ev.CallAdmitted(float(i), c, None, 1, 0))
        sched.observe(ev.CallFinished(i + 0.5, c, None))
        sched.observe(ev.WorkflowEnded(i + 0.6, c.workflow, c.tenant))
    gc.collect()
    heap = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    print(f"  {name:6s} {n:,} tenants came and went: heap {heap / 1024:8.1f} KiB  "
          f"state_bytes {sched.state_bytes():>9,d}")


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.runtime_state", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workflows", type=int, default=100_000)
    ap.add_argument("--tenants", default="1,16", help="comma-separated tenant counts")
    ap.add_argument("--policies", default="lru,cachesage,pbkv-lae")
    ap.add_argument("--scheduler-tenants", type=int, default=100_000,
                    help="tenants that come and go through each admission scheduler (0: skip)")
    args = ap.parse_args()
    n = args.workflows
    tenant_counts = [int(x) for x in args.tenants.split(",")]
    d = AgentRuntime(make_policy("lru"))
    print(f"{n:,} workflows opened, never ended; default caps: max_workflows={d.max_workflows:,}, "
          f"max_workflows_per_tenant={d.max_workflows_per_tenant:,}")
    print("memory (tracemalloc, runtime + policy):")
    for policy in args.policies.split(","):
        for tenants in tenant_counts:
            memory_run(policy, n, tenants, caps=True)
        memory_run(policy, n, 1, caps=False)
    print("loop costs (one tenant):")
    cost_run(n, 1, caps=True)
    cost_run(n, 1, caps=False)
    if args.scheduler_tenants:
        print("admission schedulers (tracemalloc):")
        for name in ("fcfs", "lpm", "las", "fair", "agent"):
            scheduler_run(name, args.scheduler_tenants)


if __name__ == "__main__":
    main()

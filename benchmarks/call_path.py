"""Where a live replay's time to first token goes, per call (`agentrt.enginebench.call_path`).

    agentrt bench --engine vllm --trace ag2.jsonl --policies lru --log-dir DIR ...
    python -m benchmarks.call_path DIR [DIR ...] [--labels lru,pbkv-ta] [--json OUT]

Each DIR is a live run's `--log-dir` (a `benchmarks.fidelity` work dir's `runN`), holding the
client's `calls-LABEL.jsonl` and the runtime's `connector-LABEL.jsonl` per policy. Prints, per
run and label, the mean TTFT split at the engine's own events: send -> vLLM's scheduler takes the
call in, its wait in the queue, the step that schedules it -> the first token at the client;
over all calls and by the number of calls in flight when it was sent. With `--sim-preset P`
(a preset from `agentrt calibrate`), the simulator also replays each run's calls
(`replayed-engine.jsonl`) with that label's policy and the same pool (`--vllm-blocks`, 256 as
`agentrt bench --engine vllm`), and the same calls' parts are printed side by side.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from agentrt.enginebench.call_path import join, markdown, side_by_side, side_by_side_markdown, simulate, summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="+", help="live runs' --log-dir")
    ap.add_argument("--labels", default=None, help="policies to read (default: every calls-*.jsonl)")
    ap.add_argument("--sim-preset", default=None, help="also the simulator on this measured preset, same calls")
    ap.add_argument("--vllm-blocks", type=int, default=256, help="the live runs' KV pool (vLLM blocks)")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    doc: dict = {"command": "python -m benchmarks.call_path " + " ".join(sys.argv[1:] if argv is None else argv),
                 "runs": {}}
    tables = []
    for d in map(Path, a.dirs):
        labels = (a.labels.split(",") if a.labels else
                  sorted(p.stem.removeprefix("calls-") for p in d.glob("calls-*.jsonl")))
        for label in labels:
            calls, events = d / f"calls-{label}.jsonl", d / f"connector-{label}.jsonl"
            if not calls.exists() or not events.exists():
                print(f"{d}: no {calls.name} or {events.name} (stock vLLM has no event log)", file=sys.stderr)
                continue
            paths = join(calls, events)
            s = summary(paths)
            tables.append(markdown(f"{d.name} {label}", s))
            if a.sim_preset:
                engine_trace = d / "replayed-engine.jsonl"
                if not engine_trace.exists():
                    print(f"{d}: no replayed-engine.jsonl for the simulator", file=sys.stderr)
                    return 1
                s["side_by_side"] = side_by_side(paths, simulate(engine_trace, a.sim_preset, label, a.vllm_blocks - 1))
                tables.append(side_by_side_markdown(f"{d.name} {label}", s["side_by_side"]))
            doc["runs"][f"{d}:{label}"] = s
    if not tables:
        print("nothing to read: give a live run's --log-dir (agentrt bench --engine vllm --log-dir DIR)",
              file=sys.stderr)
        return 1
    print("\n\n".join(tables))
    if a.json:
        Path(a.json).write_text(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

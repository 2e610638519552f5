"""Where a lone request's time to first token goes on the local vLLM, by prompt shape (a diagnosis).

    python -m benchmarks.request_path --json docs/results/engine/request-path.json

One stock vLLM (the tiny model, 256 blocks of 32, engine core at nice 19 as every agentrt run
starts it) and, per shape (`new` fresh prompt tokens after `cached` tokens vLLM already holds,
one output token), `--repeats` requests alone on the server, each bracketed by two scrapes of
vLLM's /metrics, so each request's own phases are read from vLLM's latency histograms:
the client's TTFT (send to first token), vLLM's TTFT (its API server's arrival to first token
out), the engine core's queue time and its prefill phase (scheduled to first token: the
iteration that computes the prompt). The cost model puts the prefill phase in an iteration
(`engine/costs.py`) and the rest in the request path (`request_overhead_s`), so this says which
side a shape's cost falls on: e.g. whether a short chunk after a long cached prefix pays inside
the engine's step (the preset's per-context-token term) or in the host's handling of a long
prompt. Medians per shape; writes {"shapes": [{new, cached, hit, client_ttft_s, vllm_ttft_s,
queue_s, prefill_s, path_s}], "settings": ...}. Assumptions: nothing else runs on the machine;
the model's compute does not depend on token values.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

SHAPES = ((32, 0), (32, 1024), (32, 4096), (32, 6000), (512, 0), (512, 4096), (2048, 0))


def measure(repeats: int, say=print) -> dict:
    from agentrt.enginebench import prom
    from agentrt.enginebench.calibrate import Probe
    from agentrt.local.launch import VLLMServer
    from agentrt.local.model import build_model, default_model_dir, model_info
    model = str(build_model(default_model_dir("tiny"), "tiny"))
    srv = VLLMServer(model, num_blocks=256, block_size=32, die_with_parent=True)
    srv.start()
    probe = Probe(srv.base_url, srv.served_name, model_info(model)["vocab"])
    shapes = []
    try:
        probe.request(probe.tokens(8), 2)                  # first-request costs off the clock
        for new, cached in SHAPES:
            rows = []
            for _ in range(repeats):
                prefix = probe.tokens(cached)
                if cached:
                    probe.request(prefix, 1)
                before = prom.scrape_now(srv.base_url)
                times, hit = probe.request(prefix + probe.tokens(new), 1)
                ph = prom.phases(prom.delta(prom.scrape_now(srv.base_url), before))
                rows.append({"client_ttft_s": times[0], "vllm_ttft_s": ph["ttft"], "queue_s": ph["queue"],
                             "prefill_s": ph["prefill"], "hit": hit})
            med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
            med["path_s"] = med["client_ttft_s"] - med["queue_s"] - med["prefill_s"]
            shapes.append({"new": new, "cached": cached, **med})
            say(f"new {new:5d} after {cached:5d} cached (hit {med['hit']:.0f}): client {1e3 * med['client_ttft_s']:6.1f} ms, "
                f"vLLM TTFT {1e3 * med['vllm_ttft_s']:6.1f}, queue {1e3 * med['queue_s']:5.2f}, "
                f"prefill {1e3 * med['prefill_s']:6.1f}, path {1e3 * med['path_s']:5.1f}")
    finally:
        probe.close()
        srv.stop()
    return {"shapes": shapes, "settings": {"repeats": repeats, "engine_core_nice": srv.nice_applied}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.request_path", description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    t0 = time.time()
    doc = measure(a.repeats)
    doc["settings"].update(command="python -m benchmarks.request_path " + " ".join(sys.argv[1:] if argv is None else argv),
                           seconds=round(time.time() - t0))
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

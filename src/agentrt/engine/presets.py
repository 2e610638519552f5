"""Model and GPU presets for the engine cost model, with the public numbers they come from.

Every coefficient is derived from a public figure (model config, GPU datasheet) or is an
efficiency factor marked as an estimate. The cost model (`costs.py`) turns these into prefill,
decode and PCIe times.

Sources
- Llama-3.1-8B: meta-llama/Llama-3.1-8B config.json (32 layers, hidden 4096, 32 heads, 8 KV
  heads, head dim 128), 8.03 B parameters (model card).
- Qwen3-14B: Qwen/Qwen3-14B config.json (40 layers, hidden 5120, 40 heads, 8 KV heads, head dim
  128), 14.8 B parameters (model card).
- Qwen3-32B: Qwen/Qwen3-32B config.json (64 layers, hidden 5120, 64 heads, 8 KV heads, head dim
  128), 32.8 B parameters (model card).
- H100 SXM5 80 GB: NVIDIA H100 datasheet, 989 TFLOPS dense BF16, 3.35 TB/s HBM3.
- H200 SXM 141 GB: NVIDIA H200 datasheet, 989 TFLOPS dense BF16, 4.8 TB/s HBM3e.
- PCIe Gen5 x16: 64 GB/s per direction (PCI-SIG); host<->GPU copies from pinned memory reach
  about 80 % of it in published measurements, hence 51 GB/s effective.
- Efficiency estimates (guesses, stated as such): prefill reaches 55 % of peak FLOPs (model FLOPs
  utilisation reported for vLLM/SGLang prefill is 40-60 %); decode reaches 80 % of HBM bandwidth;
  1 ms of scheduler and launch overhead per iteration; 90 % of GPU memory for weights + KV cache
  (vLLM's default gpu_memory_utilization) minus a 2 GB activation reserve.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentrt.errors import unknown_name

GB = 1e9


@dataclass(frozen=True, slots=True)
class ModelSpec:
    name: str
    params: float          # parameters
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    dtype_bytes: int = 2   # BF16 weights and KV cache

    @property
    def weight_bytes(self) -> float:
        return self.params * self.dtype_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V for every layer: 2 x layers x kv_heads x head_dim x dtype bytes."""
        return 2 * self.layers * self.kv_heads * self.head_dim * self.dtype_bytes


@dataclass(frozen=True, slots=True)
class GPUSpec:
    name: str
    memory_bytes: float
    peak_flops: float       # dense BF16
    hbm_bytes_s: float
    pcie_bytes_s: float     # effective host->GPU bandwidth


@dataclass(frozen=True, slots=True)
class FittedCosts:
    """An iteration's time measured on a live engine (`agentrt calibrate`), the same terms as the
    roofline's but fitted, summed rather than maxed (one processor does both on a CPU engine;
    on a GPU the fit still weighs each term by what the engine showed):
    overhead + per_token x tokens + per_pair x attention pairs + per_kv_token x KV tokens read
    + per_prefill_context_token x the context before each prefill chunk (what a chunk after a
    cached prefix pays beyond its attention pairs, inside vLLM-CPU's own prefill phase:
    `benchmarks/request_path.py`; 0 in presets fitted before it)."""
    overhead_s: float
    per_token_s: float
    per_pair_s: float
    per_kv_token_s: float
    per_prefill_context_token_s: float = 0.0

    def __post_init__(self) -> None:
        for name in ("overhead_s", "per_token_s", "per_pair_s", "per_kv_token_s", "per_prefill_context_token_s"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and v >= 0 and v == v and v != float("inf")):
                raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")


@dataclass(frozen=True, slots=True)
class Preset:
    name: str
    model: ModelSpec
    gpu: GPUSpec
    mfu: float = 0.55
    bw_efficiency: float = 0.80
    iteration_overhead_s: float = 1e-3
    memory_utilization: float = 0.90
    activation_reserve_bytes: float = 2 * GB
    fitted: FittedCosts | None = None     # a preset measured on an engine (preset_file.py)
    kv_tokens: int | None = None          # that engine's KV pool, instead of the memory formula

    def kv_capacity_tokens(self) -> int:
        """KV-cache tokens that fit beside the weights (vLLM's profile, in closed form), or the
        measured engine's pool."""
        if self.kv_tokens is not None:
            return self.kv_tokens
        free = (self.gpu.memory_bytes * self.memory_utilization - self.model.weight_bytes
                - self.activation_reserve_bytes)
        return max(0, int(free // self.model.kv_bytes_per_token))

    def gpu_blocks(self, block_size: int) -> int:
        return self.kv_capacity_tokens() // block_size


LLAMA31_8B = ModelSpec("Llama-3.1-8B", 8.03e9, layers=32, hidden=4096, heads=32, kv_heads=8, head_dim=128)
QWEN3_14B = ModelSpec("Qwen3-14B", 14.8e9, layers=40, hidden=5120, heads=40, kv_heads=8, head_dim=128)
QWEN3_32B = ModelSpec("Qwen3-32B", 32.8e9, layers=64, hidden=5120, heads=64, kv_heads=8, head_dim=128)

H100 = GPUSpec("H100-SXM5-80GB", 80 * GB, 989e12, 3.35e12, 51.2 * GB)
H200 = GPUSpec("H200-SXM-141GB", 141 * GB, 989e12, 4.8e12, 51.2 * GB)

PRESETS: dict[str, Preset] = {
    p.name: p for p in [
        Preset("llama3.1-8b-h100", LLAMA31_8B, H100),
        Preset("llama3.1-8b-h200", LLAMA31_8B, H200),
        Preset("qwen3-14b-h100", QWEN3_14B, H100),
        Preset("qwen3-14b-h200", QWEN3_14B, H200),
        Preset("qwen3-32b-h100", QWEN3_32B, H100),
        Preset("qwen3-32b-h200", QWEN3_32B, H200),
    ]
}
DEFAULT_PRESET = "llama3.1-8b-h100"


def get_preset(name: str) -> Preset:
    try:
        return PRESETS[name]
    except KeyError:
        raise unknown_name("preset", name, list(PRESETS)) from None

"""Build a small random-weight Llama model and a byte-level BPE tokenizer offline.

No downloads: the tokenizer is trained in seconds with `tokenizers` on Python sources of the
running interpreter's standard library, saved with `transformers`' PreTrainedTokenizerFast and a
ChatML-style chat template; the model is a `LlamaConfig` + `LlamaForCausalLM` with seeded random
weights saved as float32 safetensors. Real compute and real KV caching are what matter here, not
the text the model produces.

Sizes: "tiny" (hidden 256, 4 layers, about 5 M parameters) for tests; "small" (hidden 1024,
8 layers, about 120 M parameters) for benchmarks. Needs the `vllm` extra (transformers, tokenizers).
"""

from __future__ import annotations

import glob
import json
import os
import sysconfig
import time
from pathlib import Path

SIZES = {
    "tiny": dict(hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                 num_attention_heads=4, num_key_value_heads=4, vocab=4096),
    "small": dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
                  num_attention_heads=16, num_key_value_heads=16, vocab=8192),
}
# shapes served with vLLM's dummy weights (`--load-format dummy`): config and tokenizer only, for
# GPU machines (benchmarks/gpu/run.py); Llama-3.1-8B's layers, widths and heads, a small vocabulary
CONFIG_ONLY = {
    "llama3.1-8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                        num_attention_heads=32, num_key_value_heads=8, vocab=8192),
}
SPECIAL = ["<unk>", "<s>", "</s>", "<pad>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for m in messages %}"
    "<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
MAX_LEN = 8192


def _corpus(max_files: int = 400, max_bytes: int = 8_000_000) -> list[str]:
    root = sysconfig.get_paths()["stdlib"]
    files = sorted(glob.glob(os.path.join(root, "*.py"))) + sorted(glob.glob(os.path.join(root, "*", "*.py")))
    out, total = [], 0
    for f in files[:max_files]:
        size = os.path.getsize(f)
        if total + size > max_bytes:
            break
        out.append(f)
        total += size
    if not out:
        raise RuntimeError("no local text found to train the tokenizer on")
    return out


def _tokenizer(out_dir: Path, vocab: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=SPECIAL, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train(_corpus(), trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                   unk_token="<unk>", pad_token="<pad>", model_max_length=MAX_LEN)
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(out_dir))
    return fast


def _llama_config(out: Path, spec: dict, rope_theta: float, dtype: str):
    """Train the tokenizer into `out` and return (tokenizer, LlamaConfig) of shape `spec`."""
    from transformers import LlamaConfig
    spec = dict(spec)
    tok = _tokenizer(out, spec.pop("vocab"))
    cfg = LlamaConfig(vocab_size=len(tok), max_position_embeddings=MAX_LEN, rms_norm_eps=1e-5,
                      rope_theta=rope_theta, tie_word_embeddings=False, bos_token_id=tok.bos_token_id,
                      eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                      torch_dtype=dtype, **spec)
    return tok, cfg


def _fresh_dir(out_dir: str | Path, name: str, known: dict) -> tuple[Path, bool]:
    """(the directory, whether it is already complete); refuses an unknown shape name."""
    if name not in known:
        raise ValueError(f"unknown model size {name!r}; valid: {', '.join(known)}")
    out = Path(out_dir)
    if (out / "build_info.json").exists():
        return out, True
    out.mkdir(parents=True, exist_ok=True)
    return out, False


def build_model(out_dir: str | Path, size: str = "tiny", seed: int = 0) -> Path:
    """Build (or reuse, if already complete) a model directory; returns its path."""
    out, done = _fresh_dir(out_dir, size, SIZES)
    if done:
        return out
    import torch
    from transformers import LlamaForCausalLM

    t0 = time.time()
    tok, cfg = _llama_config(out, SIZES[size], 10000.0, "float32")
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg).to(torch.float32).eval()
    model.save_pretrained(str(out), safe_serialization=True)
    info = {"size": size, "vocab": len(tok), "params": sum(t.numel() for t in model.parameters()),
            "seed": seed, "build_s": round(time.time() - t0, 2)}
    (out / "build_info.json").write_text(json.dumps(info, indent=1))
    return out


def build_config_only(out_dir: str | Path, shape: str = "llama3.1-8b") -> Path:
    """A model directory with config.json and a tokenizer but no weights, for vLLM's
    `--load-format dummy` (random weights made on the device; nothing downloaded or written)."""
    out, done = _fresh_dir(out_dir, shape, CONFIG_ONLY)
    if done:
        return out
    spec = CONFIG_ONLY[shape]
    tok, cfg = _llama_config(out, spec, 500000.0, "bfloat16")
    cfg.save_pretrained(str(out))
    h, kv = spec["hidden_size"], spec["num_key_value_heads"] / spec["num_attention_heads"]
    params = spec["num_hidden_layers"] * (2 * h * h * (1 + kv) + 3 * h * spec["intermediate_size"]) + 2 * h * len(tok)
    (out / "build_info.json").write_text(json.dumps({"size": shape, "vocab": len(tok), "params": int(params),
                                                     "weights": "dummy"}, indent=1))
    return out


def default_model_dir(size: str = "tiny") -> Path:
    base = Path(os.environ.get("AGENTRT_CACHE", Path.home() / ".cache" / "agentrt"))
    return base / "models" / f"llama-{size}"


def model_info(model_dir: str | Path) -> dict:
    """Size, parameters and vocabulary of a built model directory (for reports and renderers)."""
    d = Path(model_dir)
    info = json.loads((d / "build_info.json").read_text())
    cfg = json.loads((d / "config.json").read_text())
    return {"dir": str(d), "size": info.get("size"), "params": info.get("params"),
            "vocab": int(cfg["vocab_size"]), "hidden": cfg.get("hidden_size"),
            "layers": cfg.get("num_hidden_layers")}

"""Worker side of the host tier: host-memory copies of KV blocks, and the copies each step asks for.

vLLM gives the worker its KV cache as one tensor per attention layer
(`register_kv_caches`); one dimension indexes blocks (dimension 0 on the CPU backend,
`[num_blocks, kv_heads, block_size, 2 x head_size]`; dimension 1 on GPU layouts that put K/V
first). The host buffer of a layer is the same shape with `capacity` slots on that dimension, in
host memory (pinned when the cache lives on a GPU). A step's copies:
- saves (GPU block -> host slot) run in `handle_preemptions`, which vLLM calls before it zeroes
  and reuses this step's new blocks: the evicted content is still intact;
- loads (host slot -> GPU block) run in `start_load_kv`, before the forward when the step has
  synchronous loads (vLLM's `has_sync_kv_loads`), after it otherwise (prefetches nobody reads yet).
Copies are synchronous. A failure marks the buffers broken: from then on every load is reported
to vLLM as failed (`get_block_ids_with_load_errors`, recomputed under
`kv_load_failure_policy: recompute`), so a bad copy is never read as KV.
"""

from __future__ import annotations

import logging

log = logging.getLogger("agentrt.vllm")


def block_dim(shape, num_blocks: int) -> int:
    """The dimension of a KV cache tensor that indexes blocks (0 or 1)."""
    for d in (0, 1):
        if len(shape) > d and shape[d] == num_blocks:
            return d
    raise ValueError(f"no block dimension of size {num_blocks} in KV cache shape {tuple(shape)}")


class HostBuffers:
    def __init__(self, kv_caches: dict, num_blocks: int, capacity: int) -> None:
        import torch
        self.capacity = capacity
        self.layers = []
        self.broken = False
        self.failed: set[int] = set()
        self.bytes = 0
        seen: dict[int, object] = {}
        for t in kv_caches.values():
            key = t.data_ptr()
            if key in seen:          # layers sharing one cache tensor share one host buffer
                continue
            d = block_dim(t.shape, num_blocks)
            shape = list(t.shape)
            shape[d] = capacity
            host = torch.empty(shape, dtype=t.dtype, device="cpu", pin_memory=t.is_cuda)
            seen[key] = host
            self.layers.append((t, host, d))
            self.bytes += host.numel() * host.element_size()

    def save(self, pairs: list) -> None:
        if not pairs or self.broken:
            return
        import torch
        try:
            ids = torch.tensor([b for b, _ in pairs], dtype=torch.long)
            slots = torch.tensor([s for _, s in pairs], dtype=torch.long)
            for t, host, d in self.layers:
                host.index_copy_(d, slots, t.index_select(d, ids.to(t.device)).to("cpu"))
        except Exception:  # noqa: BLE001 - never raise into vLLM
            self.broken = True
            log.exception("agentrt host tier: saving blocks failed; host loads are off from now on")

    def load(self, pairs: list) -> None:
        if not pairs:
            return
        if self.broken:
            self.failed.update(b for _, b in pairs)
            return
        import torch
        try:
            slots = torch.tensor([s for s, _ in pairs], dtype=torch.long)
            ids = torch.tensor([b for _, b in pairs], dtype=torch.long)
            for t, host, d in self.layers:
                t.index_copy_(d, ids.to(t.device), host.index_select(d, slots).to(t.device))
        except Exception:  # noqa: BLE001
            self.broken = True
            self.failed.update(b for _, b in pairs)
            log.exception("agentrt host tier: loading blocks failed; reported to vLLM for recompute")

    def take_failed(self) -> set[int]:
        out, self.failed = self.failed, set()
        return out

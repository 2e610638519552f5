"""Worker side of the host tier: host-memory copies of KV blocks, and the copies each step asks for.

vLLM gives the worker its KV cache as one tensor per attention layer
(`register_kv_caches`); one dimension indexes blocks (dimension 0 on the CPU backend,
`[num_blocks, kv_heads, block_size, 2 x head_size]`; dimension 1 on GPU layouts that put K/V
first). A step's copies:
- saves (GPU block -> host slot) run in `handle_preemptions`, which vLLM calls before it zeroes
  and reuses this step's new blocks: the evicted content is still intact;
- loads (host slot -> GPU block) run in `start_load_kv`, before the forward when the step has
  synchronous loads (vLLM's `has_sync_kv_loads`), after it otherwise (prefetches nobody reads yet).

On the CPU (the cache is host memory) a layer's host buffer has the cache's shape with `capacity`
slots on the block dimension and copies are plain synchronous `index_copy_`s.

On CUDA the copies never stall the step's host thread and never make the model's stream wait on
PCIe: host buffers are pinned and slot-major (`[capacity, ...]`, one contiguous piece per slot),
and all copies run on one side stream, in issue order, so a load from a slot always follows the
save into it. A save waits (on the GPU) for the work already queued on the model's stream, gathers
the blocks into a staging tensor on the side stream, and makes the model's stream wait only for
that gather before vLLM reuses the blocks; the device-to-host copies then run on their own. A load
copies host slots into staging on the side stream, scatters them into the cache there, and makes
the model's stream wait for it before the forward reads them (completion is checked on the GPU,
not by the host). Contiguous runs of slots go in one copy each.

A failure marks the buffers broken: from then on every load is reported to vLLM as failed
(`get_block_ids_with_load_errors`, recomputed under `kv_load_failure_policy: recompute`), so a
bad copy is never read as KV.
"""

from __future__ import annotations

import logging

log = logging.getLogger("vllm.agentrt")   # under vLLM's logger: its handler and level


def block_dim(shape, num_blocks: int) -> int:
    """The dimension of a KV cache tensor that indexes blocks (0 or 1)."""
    for d in (0, 1):
        if len(shape) > d and shape[d] == num_blocks:
            return d
    raise ValueError(f"no block dimension of size {num_blocks} in KV cache shape {tuple(shape)}")


def runs(pairs: list[tuple[int, int]]) -> list[tuple[int, int, int]]:
    """(first index into `pairs`, first slot, length) of the runs of consecutive slots, in order."""
    out: list[tuple[int, int, int]] = []
    for i, (slot, _) in enumerate(pairs):
        if out and out[-1][1] + out[-1][2] == slot and out[-1][0] + out[-1][2] == i:
            a, s, n = out[-1]
            out[-1] = (a, s, n + 1)
        else:
            out.append((i, slot, 1))
    return out


class HostBuffers:
    def __init__(self, kv_caches: dict, num_blocks: int, capacity: int,
                 asynchronous: bool | None = None) -> None:
        """`asynchronous`: copy on a side stream (default: when the cache is on CUDA)."""
        import torch
        self.capacity = capacity
        self.layers = []
        self.broken = False
        self.failed: set[int] = set()
        self.bytes = 0
        seen: dict[int, object] = {}
        on_cuda = any(t.is_cuda for t in kv_caches.values())
        self.asynchronous = on_cuda if asynchronous is None else (asynchronous and on_cuda)
        self.stream = torch.cuda.Stream() if self.asynchronous else None
        for t in kv_caches.values():
            key = t.data_ptr()
            if key in seen:          # layers sharing one cache tensor share one host buffer
                continue
            d = block_dim(t.shape, num_blocks)
            shape = list(t.shape)
            if self.asynchronous:    # slot-major: one contiguous piece per slot
                shape = [capacity] + shape[:d] + shape[d + 1:]
            else:
                shape[d] = capacity
            host = torch.empty(shape, dtype=t.dtype, device="cpu", pin_memory=t.is_cuda)
            seen[key] = host
            self.layers.append((t, host, d))
            self.bytes += host.numel() * host.element_size()

    # ------------------------------------------------------------------ saves
    def save(self, pairs: list) -> None:
        """Copy GPU blocks to host slots: (block id, slot) pairs."""
        if not pairs or self.broken:
            return
        try:
            if self.asynchronous:
                self._save_async([(s, b) for b, s in pairs])
            else:
                self._save_sync(pairs)
        except Exception:  # noqa: BLE001 - never raise into vLLM
            self.broken = True
            log.exception("agentrt host tier: saving blocks failed; host loads are off from now on")

    def _save_sync(self, pairs: list) -> None:
        import torch
        ids = torch.tensor([b for b, _ in pairs], dtype=torch.long)
        slots = torch.tensor([s for _, s in pairs], dtype=torch.long)
        for t, host, d in self.layers:
            host.index_copy_(d, slots, t.index_select(d, ids.to(t.device)).to("cpu"))

    def _save_async(self, by_slot: list[tuple[int, int]]) -> None:
        import torch
        by_slot.sort()
        main = torch.cuda.current_stream()
        side = self.stream
        side.wait_stream(main)                  # the blocks' content is what the model wrote
        with torch.cuda.stream(side):
            ids = torch.tensor([b for _, b in by_slot], dtype=torch.long).to(self.layers[0][0].device)
            staged = [t.index_select(d, ids).movedim(d, 0).contiguous() for t, _, d in self.layers]
            gathered = torch.cuda.Event()
            gathered.record(side)
            main.wait_event(gathered)           # vLLM may reuse the blocks once they are gathered
            for (t, host, d), g in zip(self.layers, staged):
                for i, slot, n in runs(by_slot):
                    host[slot:slot + n].copy_(g[i:i + n], non_blocking=True)

    # ------------------------------------------------------------------ loads
    def load(self, pairs: list) -> None:
        """Copy host slots into GPU blocks: (slot, block id) pairs; before the forward reads them."""
        if not pairs:
            return
        if self.broken:
            self.failed.update(b for _, b in pairs)
            return
        try:
            if self.asynchronous:
                self._load_async(sorted(pairs))
            else:
                self._load_sync(pairs)
        except Exception:  # noqa: BLE001
            self.broken = True
            self.failed.update(b for _, b in pairs)
            log.exception("agentrt host tier: loading blocks failed; reported to vLLM for recompute")

    def _load_sync(self, pairs: list) -> None:
        import torch
        slots = torch.tensor([s for s, _ in pairs], dtype=torch.long)
        ids = torch.tensor([b for _, b in pairs], dtype=torch.long)
        for t, host, d in self.layers:
            t.index_copy_(d, ids.to(t.device), host.index_select(d, slots).to(t.device))

    def _load_async(self, by_slot: list[tuple[int, int]]) -> None:
        import torch
        main = torch.cuda.current_stream()
        side = self.stream
        side.wait_stream(main)                  # nothing queued before still reads those blocks
        with torch.cuda.stream(side):
            ids = torch.tensor([b for _, b in by_slot], dtype=torch.long).to(self.layers[0][0].device)
            for t, host, d in self.layers:
                staged = torch.empty((len(by_slot), *host.shape[1:]), dtype=t.dtype, device=t.device)
                for i, slot, n in runs(by_slot):
                    staged[i:i + n].copy_(host[slot:slot + n], non_blocking=True)
                t.index_copy_(d, ids, staged.movedim(0, d))
            loaded = torch.cuda.Event()
            loaded.record(side)
        main.wait_event(loaded)                 # the forward reads them only once they are in

    def synchronize(self) -> None:
        """Wait for every queued copy (tests, shutdown)."""
        if self.stream is not None:
            self.stream.synchronize()

    def take_failed(self) -> set[int]:
        out, self.failed = self.failed, set()
        return out

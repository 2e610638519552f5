"""Iteration cost model of one serving replica (the functional shape Vidur fits, in closed form).

One engine iteration runs a batch of prefill chunks and decode steps. Its time is a roofline:
max(compute, memory) + a fixed overhead, where
- compute = 2 x params x tokens in the batch (the linear layers)
          + 4 x layers x heads x head_dim x attention pairs (QK^T and AV),
  attention pairs being, per prefill chunk of n new tokens after c cached or earlier tokens,
  n x (c + (n + 1) / 2) (causal), and per decode step the sequence's context length;
- memory  = the weights read once + the KV bytes of every context token attended to.
So prefill cost grows with new tokens and with cached context (attention over it), and decode
cost with batch size and total context. Host-to-GPU loads cost bytes / PCIe bandwidth on a
separate link that the replay schedules.
A preset measured on a live engine (`Preset.fitted`, from `agentrt calibrate`) replaces the
roofline with its fitted sum of the same terms (`presets.FittedCosts`).
"""

from __future__ import annotations

from agentrt.engine.presets import Preset


class CostModel:
    __slots__ = ("preset", "_linear_flops", "_attn_flops", "_flops_s", "_weight_s", "_kv_s",
                 "overhead", "kv_bytes_per_token", "pcie_bytes_s", "_fit")

    def __init__(self, preset: Preset) -> None:
        m, g = preset.model, preset.gpu
        self.preset = preset
        self.kv_bytes_per_token = m.kv_bytes_per_token
        self.pcie_bytes_s = g.pcie_bytes_s
        self._fit = preset.fitted
        self._linear_flops = 2.0 * m.params
        self._attn_flops = 4.0 * m.layers * m.heads * m.head_dim
        if self._fit is not None:            # measured: no datasheet figures to derive from
            self._flops_s = self._weight_s = self._kv_s = 0.0
            self.overhead = self._fit.overhead_s
            return
        self._flops_s = g.peak_flops * preset.mfu
        bw = g.hbm_bytes_s * preset.bw_efficiency
        self._weight_s = m.weight_bytes / bw
        self._kv_s = m.kv_bytes_per_token / bw
        self.overhead = preset.iteration_overhead_s

    def iteration(self, tokens: int, attn_pairs: float, kv_tokens_read: float,
                  prefill_context: float = 0.0) -> float:
        """Seconds for one iteration with `tokens` in the batch; `prefill_context`: the tokens
        before each of its prefill chunks, summed (a fitted preset's own term; the roofline
        counts that context in the pairs and the KV read only)."""
        if tokens <= 0:
            return 0.0
        f = self._fit
        if f is not None:
            return (f.overhead_s + f.per_token_s * tokens + f.per_pair_s * attn_pairs
                    + f.per_kv_token_s * kv_tokens_read + f.per_prefill_context_token_s * prefill_context)
        compute = (self._linear_flops * tokens + self._attn_flops * attn_pairs) / self._flops_s
        memory = self._weight_s + self._kv_s * kv_tokens_read
        return (compute if compute > memory else memory) + self.overhead

    @staticmethod
    def prefill_pairs(new_tokens: int, context_before: int) -> float:
        return new_tokens * (context_before + (new_tokens + 1) / 2.0)

    def prefill(self, new_tokens: int, cached_tokens: int) -> float:
        """A lone prefill of `new_tokens` after `cached_tokens` (for docs, tests and estimates)."""
        return self.iteration(new_tokens, self.prefill_pairs(new_tokens, cached_tokens),
                              cached_tokens + new_tokens, cached_tokens)

    def decode(self, batch: int, total_context: int) -> float:
        """One decode step of `batch` sequences holding `total_context` tokens in all."""
        return self.iteration(batch, total_context, total_context)

    def pcie_seconds(self, nbytes: float) -> float:
        return nbytes / self.pcie_bytes_s

"""A KV connector that does nothing: the yardstick for what configuring any connector costs.

The smallest concrete subclass of vLLM 0.32's `KVConnectorBase_V1`: every hook returns at once
with what a connector with nothing to load or save returns. vLLM treats it like any connector
(the per-step metadata, the worker's connector context around each forward, the output
aggregation, and on the CPU one more reserved core: `cpu_binding.py`), so the difference between
stock vLLM and vLLM with this connector is the cost of vLLM's connector path itself, and the
difference between it and `AgentRTConnector` is agentrt's own. Used by
`benchmarks/connector_cost.py`; load it with
    --kv-transfer-config '{"kv_connector": "NoopConnector",
                           "kv_connector_module_path": "agentrt.vllm.noop", "kv_role": "kv_producer"}'
"""

from __future__ import annotations

from typing import Any

from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorBase_V1, KVConnectorMetadata

NOOP_CONFIG = {"kv_connector": "NoopConnector", "kv_connector_module_path": "agentrt.vllm.noop",
               "kv_role": "kv_producer"}


class LayerlessConnector(KVConnectorBase_V1):
    """A connector that moves no KV layer by layer: the worker's per-layer hooks return at once.
    `AgentRTConnector` (which loads whole blocks at the step's start) and `NoopConnector` share it."""

    def wait_for_layer_load(self, layer_name: str) -> None:
        return None

    def save_kv_layer(self, layer_name: str, kv_layer, attn_metadata, **kwargs: Any) -> None:
        return None

    def wait_for_save(self) -> None:
        return None


class NoopConnector(LayerlessConnector):
    def get_num_new_matched_tokens(self, request, num_computed_tokens: int) -> tuple[int, bool]:
        return 0, False

    def update_state_after_alloc(self, request, blocks, num_external_tokens: int) -> None:
        return None

    def build_connector_meta(self, scheduler_output) -> KVConnectorMetadata:
        return KVConnectorMetadata()

    def start_load_kv(self, forward_context, **kwargs: Any) -> None:
        return None

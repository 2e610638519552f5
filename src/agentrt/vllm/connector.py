"""`AgentRTConnector`: a vLLM 0.32 KV connector that hosts the agentrt runtime inside the engine.

Load it with (see docs/vllm.md; `agentrt.vllm.config.kv_transfer_arg` builds the value; the
name resolves through agentrt's vLLM plugin, `plugin.py`, or add
`"kv_connector_module_path": "agentrt.vllm.connector"`):
    --kv-transfer-config '{"kv_connector": "AgentRTConnector", "kv_role": "kv_producer",
                           "kv_connector_extra_config": {"policy": "cachesage"}}'
Each instance checks the vLLM version first (`plugin.check_vllm_version`): an unsupported vLLM
fails at start-up, naming the supported range.

vLLM makes one instance per process and role:
- scheduler (EngineCore process): hosts `HostedRuntime` (`hosted.py`): request arrivals (with
  their identity from kv_hints, session_id and vllm_xargs: `identity.py`), lookups
  and finishes become runtime events, the pool's free queue is kept in policy order. The policy
  `lru` (the default) leaves vLLM's order alone.
- worker: with a host tier (`host_blocks` > 0), the host-memory copies of blocks (`worker.py`):
  saves before the step's forward reuses evicted blocks, loads before the forward reads them.
Without a host tier the scheduler role is all agentrt needs: `scheduler.py` builds it inside vLLM's
scheduler class with no KV connector configured, so vLLM's workers run without a connector path.
Every hook is guarded: an exception is logged once and switches the runtime off (stock vLLM
from then on); the hook returns what a connector with nothing to load returns. Bad settings
(unknown policy, bad options) fail the engine at start-up, before any request is taken.
Metrics (`prom.py`): the scheduler's `get_kv_connector_stats` reports what changed in the hosted
runtime's stats each step; vLLM carries it to the API server, where the families from
`build_prom_metrics` export it as `agentrt_connector_*` on vLLM's own /metrics. A failure there
only stops the metrics.
This module is imported by every vLLM process, the API server included: agentrt is imported
lazily, by the scheduler only. vLLM's connector API is internal: pinned to vLLM 0.32.0.
"""

from __future__ import annotations

import functools
import logging
from time import perf_counter
from typing import TYPE_CHECKING, Any

from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorMetadata,
    KVConnectorRole,
)
from vllm.v1.metrics.cache_hit_source import CacheHitSource

from agentrt.vllm.noop import LayerlessConnector

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.distributed.kv_transfer.kv_connector.v1.metrics import (
        KVConnectorPromMetrics,
        KVConnectorStats,
    )
    from vllm.forward_context import ForwardContext
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.kv_cache_interface import KVCacheConfig
    from vllm.v1.request import Request

log = logging.getLogger("vllm.agentrt")   # under vLLM's logger: its handler and level


class AgentRTMetadata(KVConnectorMetadata):
    """Scheduler -> worker, once per step: the host tier's copies (empty without one)."""

    def __init__(self, saves: list | None = None, loads: list | None = None) -> None:
        self.saves = saves or []     # (GPU block id, host slot)
        self.loads = loads or []     # (host slot, GPU block id)


def _guarded(default):
    """Run a scheduler hook against the hosted runtime; any exception switches the runtime off.
    The hook's time is added to the runtime's `hook_time` (the connector's cost per step)."""
    def deco(fn):
        @functools.wraps(fn)
        def wrapper(self, *args, **kwargs):
            h = self._hosted
            if h is None or h.failed:
                return default()
            t0 = perf_counter()
            try:
                return fn(self, h, *args, **kwargs)
            except Exception as e:  # noqa: BLE001 - never raise into vLLM
                h.fail(fn.__name__, e)
                return default()
            finally:
                h.hook_time.add(perf_counter() - t0)
        return wrapper
    return deco


class AgentRTConnector(LayerlessConnector):
    _cache_hit_source = CacheHitSource.HOST     # the only external hits are host-tier loads

    def __init__(self, vllm_config: "VllmConfig", role: KVConnectorRole,
                 kv_cache_config: "KVCacheConfig | None" = None) -> None:
        # loaded by module path the plugin's check is skipped: refuse an unsupported vLLM here too
        from agentrt.vllm.plugin import check_vllm_version
        check_vllm_version()
        super().__init__(vllm_config, role, kv_cache_config)
        from agentrt.vllm.config import ConnectorConfig
        from agentrt.vllm.eventlog import EventLog
        extra = self._kv_transfer_config.kv_connector_extra_config or {}
        self.cfg, unknown = ConnectorConfig.from_extra(extra)
        self.block_size = vllm_config.cache_config.block_size
        scheduler = role == KVConnectorRole.SCHEDULER
        self.elog = EventLog(self.cfg.event_log, "scheduler" if scheduler else "worker")
        self._hosted = None
        self._reporter = None
        self._side = None                    # side_metrics.SideMetrics, in the scheduler class
        self._buffers = None
        self._failed_loads: set[int] = set()
        if unknown:
            log.warning("agentrt: unknown kv_connector_extra_config keys ignored: %s", unknown)
            self.elog.write("error", where="config", unknown_keys=unknown)
        if self.cfg.metrics_port is not None:
            from agentrt.vllm.config import METRICS_PORT_REFUSED
            log.warning("agentrt: %s; ignored", METRICS_PORT_REFUSED)
            self.elog.write("error", where="config", ignored="metrics_port")
        if scheduler:
            from agentrt.vllm.hosted import HostedRuntime
            backend = getattr(vllm_config.parallel_config, "distributed_executor_backend", None)
            self._hosted = HostedRuntime(self.cfg, self.block_size, self.elog,
                                         separate_workers=backend == "mp")
            from agentrt.vllm.prom import StatsReporter
            self._reporter = StatsReporter(interval=self.cfg.stats_interval_s)
            log.info("agentrt: policy %s, reorder %s", self.cfg.policy, self._hosted.reorder)
        self.elog.write("init", policy=self.cfg.policy, block_size=self.block_size,
                        reorder=not self.cfg.stock, host_blocks=self.cfg.host_blocks)

    def stats_to_side(self, side=None) -> None:
        """Report no stats to vLLM: hosted by `AgentRTScheduler`, whose API server has no metric
        families for them (`scheduler.py`); with `side` (a `side_metrics.SideMetrics`), hand them
        to it instead, as often as they would have gone to vLLM."""
        self._side = side
        if side is None:
            self._reporter = None

    @property
    def requires_kv_delivery(self) -> bool:
        return False   # a best-effort cache: a dropped copy is only a future miss

    @property
    def hosted(self):
        return self._hosted

    # ============================================================ scheduler side
    def bind_gpu_block_pool(self, gpu_block_pool) -> None:
        h = self._hosted
        if h is None:
            return
        try:
            h.bind_pool(gpu_block_pool)
        except Exception as e:  # noqa: BLE001
            h.fail("bind_gpu_block_pool", e)

    @_guarded(lambda: None)
    def on_new_request(self, h, request: "Request") -> None:
        h.arrived(request)

    @_guarded(lambda: (0, False))
    def get_num_new_matched_tokens(self, h, request: "Request",
                                   num_computed_tokens: int) -> tuple[int | None, bool]:
        return h.lookup(request, num_computed_tokens), False

    @_guarded(lambda: None)
    def update_state_after_alloc(self, h, request: "Request", blocks: "KVCacheBlocks",
                                 num_external_tokens: int) -> None:
        h.allocated(request, blocks, num_external_tokens)

    def build_connector_meta(self, scheduler_output: "SchedulerOutput") -> KVConnectorMetadata:
        self._step(scheduler_output)
        h = self._hosted
        plan = None
        if h is not None:
            h.steps += 1
            t0 = perf_counter()
            try:
                plan = h.end_step()
            except Exception as e:  # noqa: BLE001
                h.fail("end_step", e)
            h.hook_time.add(perf_counter() - t0)
        if plan is None:
            return AgentRTMetadata()
        return AgentRTMetadata(plan.saves, plan.loads)

    @_guarded(lambda: None)
    def _step(self, h, scheduler_output) -> None:
        h.step(scheduler_output)

    @_guarded(lambda: None)
    def during_forward(self, h, forward_s: float | None) -> None:
        """The worker is running the step's forward pass (called by `scheduler.py`'s scheduler)."""
        h.during_forward(forward_s)

    def request_finished(self, request: "Request",
                         block_ids: list[int]) -> tuple[bool, dict[str, Any] | None]:
        self._finished(request, block_ids)
        return False, None

    @_guarded(lambda: None)
    def _finished(self, h, request, block_ids) -> None:
        if block_ids and isinstance(block_ids[0], (list, tuple)):   # per-group ids
            block_ids = block_ids[0]
        h.finished(request, list(block_ids))
        if self.elog.enabled:            # the stats are built only for a log that keeps them
            self.elog.write("stats", **h.stats())

    def reset_cache(self) -> bool | None:
        self._reset()
        return None

    @_guarded(lambda: None)
    def _reset(self, h) -> None:
        h.reset()

    def shutdown(self):
        if self._hosted is not None:
            self.elog.write("shutdown", **self._hosted.stats())
        if self._side is not None:
            self._side.close()

    # ============================================================ metrics
    def get_kv_connector_stats(self) -> "KVConnectorStats | None":
        h, rep = self._hosted, self._reporter
        if h is None or rep is None:
            return None                      # workers report nothing
        t0 = perf_counter()
        try:
            if not rep.due(h.change_marker(), t0, h.idle):
                return None
            if self._side is not None:
                self._side.update(h.stats())
                return None
            return rep.take(h.stats())
        except Exception as e:  # noqa: BLE001 - metrics never change what the engine does
            if not rep.broken:
                rep.broken = True
                log.exception("agentrt: connector metrics off (%r)", e)
                self.elog.write("error", where="get_kv_connector_stats", error=repr(e))
            return None
        finally:
            h.hook_time.add(perf_counter() - t0)

    @classmethod
    def build_kv_connector_stats(cls, data: dict[str, Any] | None = None) -> "KVConnectorStats | None":
        from agentrt.vllm.prom import AgentRTStats
        return AgentRTStats(data=dict(data or {}))

    @classmethod
    def build_prom_metrics(cls, vllm_config: "VllmConfig", metric_types: dict,
                           labelnames: list[str], per_engine_labelvalues: dict[int, list[object]],
                           ) -> "KVConnectorPromMetrics | None":
        try:
            from agentrt.vllm.prom import AgentRTPromMetrics, policy_of
            return AgentRTPromMetrics(vllm_config, metric_types, labelnames, per_engine_labelvalues,
                                      policy_of(vllm_config))
        except Exception as e:  # noqa: BLE001 - vLLM serves on without the connector's metrics
            log.exception("agentrt: no connector metrics (%r)", e)
            return None

    # =============================================================== worker side
    def bind_connector_metadata(self, connector_metadata: KVConnectorMetadata) -> None:
        # Without a host tier the worker has nothing to do with a step's metadata; left unbound,
        # vLLM's per-attention-layer wrapper (maybe_transfer_kv_layer) returns before calling
        # wait_for_layer_load and save_kv_layer on every layer of every step.
        if self.cfg.host_blocks > 0:
            super().bind_connector_metadata(connector_metadata)

    def register_kv_caches(self, kv_caches: dict) -> None:
        if self.cfg.host_blocks <= 0:
            return
        try:
            from agentrt.vllm.worker import HostBuffers
            self._buffers = HostBuffers(kv_caches, self._kv_cache_config.num_blocks,
                                        self.cfg.host_blocks)
            log.info("agentrt: host tier of %d blocks, %.1f MiB", self.cfg.host_blocks,
                     self._buffers.bytes / 2**20)
            self.elog.write("host_buffers", blocks=self.cfg.host_blocks, bytes=self._buffers.bytes,
                            layers=len(self._buffers.layers))
        except Exception as e:  # noqa: BLE001 - loads are then reported as failed
            log.exception("agentrt: no host tier (%r)", e)
            self.elog.write("error", where="register_kv_caches", error=repr(e))
            self._buffers = None

    def handle_preemptions(self, kv_connector_metadata) -> None:
        # runs before vLLM zeroes and reuses this step's new blocks: evicted content is intact
        if self._buffers is not None and isinstance(kv_connector_metadata, AgentRTMetadata):
            self._buffers.save(kv_connector_metadata.saves)

    def start_load_kv(self, forward_context: "ForwardContext", **kwargs: Any) -> None:
        if not self.has_connector_metadata():
            return
        meta = self._get_connector_metadata()
        if not isinstance(meta, AgentRTMetadata) or not meta.loads:
            return
        if self._buffers is None:
            self._failed_loads.update(b for _, b in meta.loads)
            return
        self._buffers.load(meta.loads)

    def get_block_ids_with_load_errors(self) -> set[int]:
        out = self._failed_loads
        self._failed_loads = set()
        if self._buffers is not None:
            out |= self._buffers.take_failed()
        return out

"""`AgentRTScheduler`: agentrt inside vLLM's scheduler with no KV connector configured.

Configuring any KV connector switches vLLM 0.32's workers and executor onto a per-step connector
path (the worker's connector context around each forward, a wrapper on every attention layer,
the connector output aggregated per step), whose cost on a small CPU machine is as large as the
target for agentrt's whole cost (docs/vllm.md, "What the connector costs"). Without a host tier
agentrt needs none of it: all its work is the scheduler's. This scheduler, a subclass of vLLM's
own, builds the same `AgentRTConnector` in its scheduler role and calls its scheduler hooks from
its own overrides, at the points where vLLM calls them for a configured connector (one code path
for both integrations), while vLLM's `scheduler.connector` stays None: neither the scheduler nor
the workers nor the executor take any connector path, so what this class adds to stock vLLM is
agentrt's own work, which its metrics time (`agentrt_connector_hook_seconds_total`):

    --scheduler-cls agentrt.vllm.scheduler.AgentRTScheduler
    --additional-config '{"agentrt": {"policy": "pbkv-ta"}}'

(`agentrt.vllm.config.scheduler_args` builds both). The `agentrt` object takes the connector's
`kv_connector_extra_config` keys (docs/vllm.md). Where vLLM calls each hook, and where this class
does (`HOOK_POINTS`):
- `on_new_request`: after vLLM's `add_request` for a new request (vLLM: inside it);
- `get_num_new_matched_tokens`: after the local prefix-cache lookup of a waiting request
  (`_get_local_prefix_cache_hit`), before its allocation, as vLLM calls it; its answer is
  always 0 here (no host tier) and vLLM never sees it;
- `update_state_after_alloc`: for each request looked up this step that vLLM then scheduled,
  after `schedule` (vLLM: right after each allocation; without a host tier the hook only
  records that the request left the queue, which nothing reads before the step ends);
- `build_connector_meta`: after `schedule` (vLLM: at its end); the metadata is dropped;
- `request_finished`: in `_connector_finished`, before vLLM frees the request's blocks;
- `get_kv_connector_stats`: after `update_from_output` (vLLM: in its stats);
- `reset_cache`, `shutdown`: after vLLM's own.
Limits, by construction:
- no host tier (`host_blocks` > 0 needs the worker: load the connector instead);
- one KV cache group (standard decoder models): a hybrid or sliding-window model is refused at
  start-up (the connector turns vLLM's hybrid KV cache manager off; this class does not);
- no `agentrt_connector_*` metrics on vLLM's /metrics: vLLM's API server builds a connector's
  metric families only from a configured `--kv-transfer-config`; `"metrics_port": N` serves the
  same families from the scheduler process on a port of their own (`side_metrics.py`), and the
  event log (`event_log`) records them too;
- where a KV connector is configured as well, it is left alone and this class adds nothing;
- async scheduling (vLLM's default on a GPU; off on the CPU) needs `AgentRTAsyncScheduler`, the
  same hooks on vLLM's `AsyncScheduler` (not run here: no GPU).
"""

from __future__ import annotations

import copy
import logging
import time

from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.request import RequestStatus

from agentrt.vllm.config import ADDITIONAL_CONFIG_KEY as CONFIG_KEY

log = logging.getLogger("vllm.agentrt")

HOOK_POINTS = {               # the connector's scheduler hook: the vLLM method this class calls it from
    "on_new_request": "add_request",
    "get_num_new_matched_tokens": "_get_local_prefix_cache_hit",
    "update_state_after_alloc": "schedule",
    "build_connector_meta": "schedule",
    "request_finished": "_connector_finished",
    "get_kv_connector_stats": "update_from_output",
    "reset_cache": "reset_prefix_cache",
    "shutdown": "shutdown",
}


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
    conn.stats_to_side(side)
    return conn


def host_agentrt(scheduler, vllm_config, kv_cache_config, forward_window: bool):
    """agentrt's connector for a scheduler vLLM built without one (after its constructor), bound
    to its KV cache manager; the scheduler's own `connector` stays None. Returns None where a KV
    connector was configured: that one stays, and agentrt adds nothing. `forward_window`: the
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
    conn = scheduler_connector(vllm_config, kv_cache_config, settings(vllm_config))
    conn.bind_kv_cache_manager(scheduler.kv_cache_manager)
    if conn.hosted is not None:
        conn.hosted.off_path = forward_window
    log.info("agentrt: hosted in the scheduler (no KV connector configured: vLLM runs its stock paths)")
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


class AgentRTHooks:
    """The overrides both classes share: each calls agentrt's connector (`self._agentrt`, None
    where agentrt is off) at its `HOOK_POINTS` entry, after or around vLLM's own method, which
    runs unchanged. `forward_window`: sync scheduling, where the engine core waits for the
    forward (re-ranks run in that wait)."""

    forward_window = True

    def _agentrt_init(self, vllm_config, kv_cache_config) -> None:
        self._agentrt_attach(host_agentrt(self, vllm_config, kv_cache_config, self.forward_window))

    def _agentrt_attach(self, conn) -> None:
        """The hooks' state for `conn` (agentrt's connector; None: agentrt adds nothing)."""
        self._agentrt = conn
        self._agentrt_window = ForwardWindow(conn if self.forward_window else None)
        self._agentrt_looked_up: list = []   # waiting requests looked up in this `schedule`

    def add_request(self, request) -> None:
        new = request.request_id not in self.requests
        super().add_request(request)
        if new and self._agentrt is not None:
            self._agentrt.on_new_request(request)

    def _get_local_prefix_cache_hit(self, request):
        hit = super()._get_local_prefix_cache_hit(request)
        if self._agentrt is not None:
            # as vLLM presents it to a connector: the local hit in whole blocks
            self._agentrt.get_num_new_matched_tokens(request, hit[1] - hit[1] % self.block_size)
            self._agentrt_looked_up.append(request)
        return hit

    def schedule(self, *args, **kwargs):
        out = super().schedule(*args, **kwargs)
        conn = self._agentrt
        if conn is not None:
            looked_up, self._agentrt_looked_up = self._agentrt_looked_up, []
            for request in looked_up:
                if request.status == RequestStatus.RUNNING:      # allocated and scheduled
                    conn.update_state_after_alloc(request, None, 0)
            conn.build_connector_meta(out)
        return out

    def _connector_finished(self, request):
        conn = self._agentrt
        if conn is not None:
            block_ids = self.kv_cache_manager.get_block_ids_for_computed_tokens(
                request_id=request.request_id, num_computed_tokens=request.num_computed_tokens)
            conn.request_finished(request, block_ids[0])
        return super()._connector_finished(request)

    def get_grammar_bitmask(self, scheduler_output):
        self._agentrt_window.open()
        return super().get_grammar_bitmask(scheduler_output)

    def update_from_output(self, scheduler_output, model_runner_output):
        self._agentrt_window.close()
        out = super().update_from_output(scheduler_output, model_runner_output)
        if self._agentrt is not None:
            self._agentrt.get_kv_connector_stats()     # to the side port when due; vLLM sees none
        return out

    def reset_prefix_cache(self, *args, **kwargs) -> bool:
        ok = super().reset_prefix_cache(*args, **kwargs)
        if ok and self._agentrt is not None:
            self._agentrt.reset_cache()
        return ok

    def shutdown(self) -> None:
        super().shutdown()
        if self._agentrt is not None:
            self._agentrt.shutdown()


class AgentRTScheduler(AgentRTHooks, Scheduler):
    """vLLM's scheduler with agentrt's connector (scheduler role) called from its overrides;
    vLLM itself sees no connector."""

    def __init__(self, vllm_config, kv_cache_config, *args, **kwargs) -> None:
        super().__init__(vllm_config, kv_cache_config, *args, **kwargs)
        self._agentrt_init(vllm_config, kv_cache_config)


class AgentRTAsyncScheduler(AgentRTHooks, AsyncScheduler):
    """The same on vLLM's async scheduler (async scheduling is vLLM's default on a GPU; vLLM 0.32
    turns it off on the CPU, so this class has not run here). The engine core overlaps steps
    there, so there is no forward window to use: re-ranks keep their duty cycle."""

    forward_window = False

    def __init__(self, vllm_config, kv_cache_config, *args, **kwargs) -> None:
        super().__init__(vllm_config, kv_cache_config, *args, **kwargs)
        self._agentrt_init(vllm_config, kv_cache_config)

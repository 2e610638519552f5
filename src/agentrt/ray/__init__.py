"""agentrt on Ray Serve: a request router that runs agentrt's routers over vLLM replicas.

- `blocks.py`: token block ids shared by requests and the KV-event mirror;
- `call.py`: `AgentCall`, one request with its identity and prompt blocks (built by the ingress);
- `kv_events.py`: subscriber to vLLM's ZMQ KV event publishers;
- `replica_state.py`: one replica as a `cluster.routing.ReplicaView` (KV mirror, in-flight load);
- `router.py`: `AgentRTRequestRouter`, the Ray Serve `RequestRouter`;
- `deploy.py`: the Serve application (ingress + vLLM replicas) and `serve run` builder;
- `bench.py`: hit rate of each router on a small multi-workflow run against live replicas.
Needs the `ray` extra (and `vllm` for the replicas); see docs/ray.md. Nothing here is imported
by `import agentrt`.
"""

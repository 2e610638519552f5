"""`agentrt serve`: the runtime layer as an OpenAI-compatible HTTP server in front of one vLLM server.

Frameworks send agent and workflow identity as headers or body metadata; the server forwards each
request to the engine with that identity attached (`session_id`, `vllm_xargs`), feeds the calls to
an `AgentRuntime` hosting a policy, carries out the policy's warm-ups while the engine is otherwise
idle, and exports Prometheus metrics. Needs the `serve` extra (FastAPI, uvicorn, httptools, httpx,
prometheus-client). See docs/serve.md.
"""

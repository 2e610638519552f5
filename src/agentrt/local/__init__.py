"""Local engine tooling: a vLLM server started and supervised on this machine (`launch`,
`supervise`) and the random-weight models it serves (`model`). Used by tests, `agentrt bench
--engine vllm`, `agentrt calibrate`, the benchmarks and the Ray Serve replicas; not by the
connector, which runs inside whatever vLLM a user starts."""

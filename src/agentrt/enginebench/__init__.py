"""`agentrt bench --engine vllm`: replay workflow traces against a live vLLM engine (needs the `vllm` extra)."""

"""agentrt inside vLLM: a local test model, a server launcher, and the KV connector (optional extra)."""

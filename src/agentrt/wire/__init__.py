"""The wire contract: what agentrt's parts and their clients send each other, read in one place.

- `kvhints`: vLLM's kv_hints envelope and agentrt's actions in it (build and parse), the id and
  tenant limits every part checks (`MAX_ID_CHARS`, `TENANT_RE`, `clean_id`);
- `stdhints`: the standard actions being defined on the envelope (`kv.retain`, `vllm.set_priority`);
- `identity`: a request's workflow, agent and tenant as the connector reads them (kv_hints, then
  `session_id`, then agentrt's `vllm_xargs` fields), and the xargs a client sends;
- `priority`: vLLM's request priority as agentrt sets it.
The connector (`agentrt.vllm`), the server (`agentrt.serve`), the engine bench
(`agentrt.enginebench`) and the Ray integration (`agentrt.ray`) import these; a hostile value is
refused here, once. Nothing here imports vLLM at module level.
"""

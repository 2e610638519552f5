"""The engine's KV pool size, read from vLLM's `/metrics` at start and again whenever the
upstream may have restarted.

Model: vLLM exports `vllm:cache_config_info` with `kv_cache_size_tokens` (or `num_gpu_blocks`
and `block_size`). The server's cache estimate (`view.py`) needs it; an unknown size (0) makes
every prefix count as evicted once anything else ran. The size is read at start; then, unless
`--kv-capacity-tokens` fixed it, `refresh_loop` reads it again every `retry_s` while it is
unknown or stale (the bridge marks it stale when the upstream could not be reached: it may come
back restarted, with another pool), and every `every_s` anyway (a restart nobody's call noticed).
A failed read keeps the last known size and is tried again.
"""

from __future__ import annotations

import asyncio
import logging
import re

import httpx

log = logging.getLogger("agentrt.serve")
RETRY_S = 5.0            # while the size is unknown or stale
EVERY_S = 60.0           # in any case


async def kv_capacity_tokens(client: httpx.AsyncClient) -> int | None:
    """The upstream's KV pool in tokens, from vLLM's `vllm:cache_config_info` metric."""
    r = await client.get("/metrics", timeout=10)
    return parse_capacity(r.text)


def parse_capacity(text: str) -> int | None:
    """The KV pool in tokens from a `/metrics` exposition, None when it is not there."""
    for line in text.splitlines():
        if line.startswith("vllm:cache_config_info{"):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
            if labels.get("kv_cache_size_tokens", "").isdigit():
                return int(labels["kv_cache_size_tokens"])
            if labels.get("num_gpu_blocks", "").isdigit() and labels.get("block_size", "").isdigit():
                return int(labels["num_gpu_blocks"]) * int(labels["block_size"])
    return None


async def read_into(bridge, client: httpx.AsyncClient) -> bool:
    """Read the capacity into `bridge.cache`; True when it was read."""
    try:
        got = await kv_capacity_tokens(client)
    except httpx.HTTPError as e:
        log.debug("could not read the upstream's KV capacity: %s", e)
        return False
    if not got:
        return False
    if got != bridge.cache.capacity_tokens:
        log.info("upstream KV capacity: %d tokens", got)
    bridge.cache.capacity_tokens = got
    bridge.capacity_stale = False
    return True


async def refresh_loop(bridge, client: httpx.AsyncClient) -> None:
    since, retry_s, every_s = 0.0, RETRY_S, EVERY_S
    while True:
        await asyncio.sleep(retry_s)
        since += retry_s
        if bridge.capacity_stale or not bridge.cache.capacity_tokens or since >= every_s:
            since = 0.0
            await read_into(bridge, client)

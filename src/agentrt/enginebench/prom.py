"""Read vLLM's Prometheus counters (`GET /metrics`): prefix-cache queries and hits, by name.

Counters are summed over their label sets; a run's figures are deltas between two scrapes, so a
server that served something before the run (a warm-up) does not skew them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import httpx

QUERIES = "vllm:prefix_cache_queries_total"
HITS = "vllm:prefix_cache_hits_total"
EXT_QUERIES = "vllm:external_prefix_cache_queries_total"
EXT_HITS = "vllm:external_prefix_cache_hits_total"
PROMPT = "vllm:prompt_tokens_total"
GENERATED = "vllm:generation_tokens_total"
PREEMPTIONS = "vllm:num_preemptions_total"
WANTED = (QUERIES, HITS, EXT_QUERIES, EXT_HITS, PROMPT, GENERATED, PREEMPTIONS)


def parse(text: str, wanted=WANTED) -> dict[str, float]:
    out = {w: 0.0 for w in wanted}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        name, _, rest = line.partition("{")
        if not rest:
            name, _, value = line.partition(" ")
        else:
            value = rest.rpartition("} ")[2]
        name = name.strip()
        if name in out:
            try:
                out[name] += float(value.split()[0])
            except (ValueError, IndexError):
                pass
    return out


async def scrape(client: httpx.AsyncClient, base_url: str) -> dict[str, float]:
    r = await client.get(base_url + "/metrics", timeout=30)
    r.raise_for_status()
    return parse(r.text)


def delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}

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
# vLLM's per-request latency histograms (their _sum and _count series): where a call's time went
# inside vLLM. TTFT and inter-token latency are the API server's (request in to token out); queue,
# prefill and decode are the engine core's (queued -> scheduled -> first token -> last token)
PHASES = {"ttft": "vllm:time_to_first_token_seconds", "inter_token": "vllm:inter_token_latency_seconds",
          "queue": "vllm:request_queue_time_seconds", "prefill": "vllm:request_prefill_time_seconds",
          "decode": "vllm:request_decode_time_seconds", "e2e": "vllm:e2e_request_latency_seconds"}
# a token that waits longer than this after the previous one is a stall (`client.py` counts them);
# it is one of the bounds of vLLM's inter-token histogram, whose bucket below it counts the rest
SLOW_GAP_S = 0.1
ITL_FAST = f'vllm:inter_token_latency_seconds_bucket{{le="{SLOW_GAP_S}"}}'
WANTED = (QUERIES, HITS, EXT_QUERIES, EXT_HITS, PROMPT, GENERATED, PREEMPTIONS, ITL_FAST,
          *(f"{h}_{part}" for h in PHASES.values() for part in ("sum", "count")))


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
        if name.endswith("_bucket"):          # one bucket by its bound: name{le="X"}
            le = rest.partition('le="')[2].partition('"')[0]
            name = f'{name}{{le="{le}"}}'
        if name in out:
            try:
                out[name] += float(value.split()[0])
            except (ValueError, IndexError):
                pass
    return out


def scrape_now(base_url: str, wanted=WANTED) -> dict[str, float]:
    """The `wanted` counters of vLLM's /metrics, now, for a blocking caller (zeros for those it
    does not export)."""
    import httpx
    return parse(httpx.get(base_url + "/metrics", timeout=30).text, wanted)


async def scrape(client: httpx.AsyncClient, base_url: str) -> dict[str, float]:
    r = await client.get(base_url + "/metrics", timeout=30)
    r.raise_for_status()
    return parse(r.text)


def delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}


def phases(d: dict[str, float]) -> dict[str, float | None]:
    """Mean seconds per request (per token for inter_token) of each of vLLM's latency histograms
    over a run (`d`: a `delta`); None where it observed nothing."""
    out: dict[str, float | None] = {}
    for name, h in PHASES.items():
        n = d.get(f"{h}_count", 0.0)
        out[name] = d.get(f"{h}_sum", 0.0) / n if n else None
    return out

"""Per-step tool latencies: how long an agent waits on each kind of tool, as seeded distributions.

Model: a tool's latency is lognormal (median, sigma of its log), or a mixture of two lognormals
where one kind of call has a slow tail of its own (an install or build among shell commands, a
user who walks away), clipped to [lo, hi]: lo is the harness's round trip, hi the timeout that
frameworks put on the tool. The latency is the wall time from the model's tool call to its result,
so it includes the harness's own round trip (a `docker exec`, the sandbox's HTTP runtime), not
only the command.

Determinism: a draw consumes exactly one uniform of the generator's stream (inverse CDF; a
mixture picks its component with the same uniform), so changing a tool's figures, or
`GenConfig.tool_scale`, changes think times only, never the structure of the workflows drawn
after it. Generators draw through `WorkflowBuilder.tool(name)`; the builder applies
`tool_scale` where it records `think_ms`.

Sources (docs/workloads.md has the table; `agentrt tools` prints it with sampled quantiles):
- web_fetch: HTTP Archive's loading-speed report puts the median desktop page's onLoad at about
  6 s since 2019 (httparchive.org, as plotted by R. Ritz, "How much time do we waste waiting for
  websites to load?", datafantic, 2022); an agent's headless browser (Magentic-One's web surfer,
  Fourney et al. 2024) also extracts the page text. Median 5 s; the spread and the 60 s clip
  (browser navigation timeouts are of that order: Playwright's default is 30 s) are guesses.
- web_search: vendor-published p50 latencies of search APIs lie between 0.25 and 1.2 s and
  their p95s between 0.7 and 3.5 s (Brave, Serper, Tavily, Exa, SerpAPI as tabled in Scavio's
  "search API latency budget" glossary page; vendor figures, not independent measurements).
  Median 1.2 s with sigma 0.5 (p95 2.7 s).
- shell, test_run: Claude Code's Bash tool times a command out after 2 minutes by default and
  10 minutes at most (BASH_DEFAULT_TIMEOUT_MS, BASH_MAX_TIMEOUT_MS in its settings docs): the
  10-minute clip. Medians and spreads are guesses ("seconds to minutes": a test file of a
  SWE-bench repository in its container; the shell mixture's slow component is an install or
  a build, one command in seven).
- file_read, search, file_edit, code_exec, retrieval, human: guesses, stated as such. SWE-agent
  lints every edit before returning it (Yang et al. 2024), hence file_edit slower than file_read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

_STD = NormalDist()
_EPS = 1e-12


@dataclass(frozen=True, slots=True)
class ToolLatency:
    """A lognormal latency (ms), optionally mixed with a slower lognormal, clipped to [lo, hi]."""
    name: str
    median_ms: float
    sigma: float
    lo_ms: float
    hi_ms: float
    source: str
    summary: str = ""
    slow_share: float = 0.0          # share of calls from the slow component
    slow_median_ms: float = 0.0
    slow_sigma: float = 0.0

    def __post_init__(self) -> None:
        if not 0 < self.lo_ms <= self.median_ms <= self.hi_ms:
            raise ValueError(f"{self.name}: need 0 < lo <= median <= hi")
        if self.sigma < 0 or self.slow_sigma < 0 or not 0.0 <= self.slow_share < 1.0:
            raise ValueError(f"{self.name}: bad sigma or slow_share")
        if self.slow_share > 0 and not self.lo_ms <= self.slow_median_ms <= self.hi_ms:
            raise ValueError(f"{self.name}: slow median outside [lo, hi]")

    def from_uniform(self, u: float) -> float:
        """The latency that one uniform u in [0, 1) maps to (the sample's distribution is exact)."""
        u = min(max(float(u), 0.0), 1.0 - _EPS)
        if u < self.slow_share:
            median, sigma, v = self.slow_median_ms, self.slow_sigma, u / self.slow_share
        else:
            median, sigma = self.median_ms, self.sigma
            v = (u - self.slow_share) / (1.0 - self.slow_share)
        v = min(max(v, _EPS), 1.0 - _EPS)
        x = median * math.exp(sigma * _STD.inv_cdf(v))
        return min(self.hi_ms, max(self.lo_ms, x))

    def sample(self, rng: np.random.Generator) -> float:
        return self.from_uniform(float(rng.uniform()))


_S = 1000.0   # ms per second

TOOLS: dict[str, ToolLatency] = {t.name: t for t in (
    ToolLatency("file_read", 0.3 * _S, 0.6, 0.05 * _S, 10 * _S, "guess",
                "open or view a file (SWE-agent open, Claude Code Read, OpenHands view)"),
    ToolLatency("search", 0.8 * _S, 0.8, 0.05 * _S, 30 * _S, "guess",
                "grep, find or glob over a repository"),
    ToolLatency("file_edit", 0.5 * _S, 0.6, 0.05 * _S, 15 * _S, "guess (SWE-agent lints each edit)",
                "apply an edit and return the edited region"),
    ToolLatency("shell", 0.6 * _S, 0.9, 0.05 * _S, 600 * _S,
                "guess; clip: Claude Code Bash timeout (10 min max)",
                "a shell command; one in seven an install or build", 0.15, 30 * _S, 1.0),
    ToolLatency("test_run", 20 * _S, 1.0, 1 * _S, 600 * _S,
                "guess; clip: Claude Code Bash timeout (10 min max)",
                "run a test file or suite"),
    ToolLatency("code_exec", 1.5 * _S, 0.9, 0.1 * _S, 120 * _S, "guess",
                "run a short script in a sandbox (interpreter start included)"),
    ToolLatency("web_fetch", 5 * _S, 0.8, 0.5 * _S, 60 * _S,
                "HTTP Archive: median desktop onLoad ~6 s; spread and clip guesses",
                "load a page in a headless browser and extract its text"),
    ToolLatency("web_search", 1.2 * _S, 0.5, 0.2 * _S, 15 * _S,
                "vendor p50s of search APIs 0.25-1.2 s; median a guess within them",
                "a web search API call"),
    ToolLatency("retrieval", 0.3 * _S, 0.6, 0.02 * _S, 5 * _S, "guess",
                "a query to a local BM25 or vector index"),
    ToolLatency("human", 25 * _S, 0.8, 3 * _S, 1800 * _S, "guess",
                "a user reads the answer and types the next message; some step away",
                0.15, 300 * _S, 1.0),
)}


def tool_latency(name: str) -> ToolLatency:
    try:
        return TOOLS[name]
    except KeyError:
        raise KeyError(f"unknown tool {name!r}; known: {', '.join(TOOLS)}") from None


def tool_ms(name: str, rng: np.random.Generator) -> float:
    """One latency draw (ms) of tool `name`, unscaled; consumes exactly one uniform of `rng`."""
    return tool_latency(name).sample(rng)


def quantiles(name: str, qs: tuple[float, ...] = (0.1, 0.5, 0.9), n: int = 20_000,
              seed: int = 0) -> list[float]:
    """Sampled quantiles (ms) of a tool's latency: the figures `agentrt tools` prints."""
    t = tool_latency(name)
    u = np.random.default_rng(seed).uniform(size=n)
    xs = np.fromiter((t.from_uniform(x) for x in u), dtype=float, count=n)
    return [float(v) for v in np.quantile(xs, qs)]

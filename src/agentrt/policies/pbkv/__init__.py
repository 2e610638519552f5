"""The PBKV family: PBKV as published, and PBKV-TA, agentrt's time-aware variant.

Variants (policy name: class, module)
- `pbkv-lae`: `PBKVLAEPolicy` (policy.py). Lifecycle-aware eviction: blocks whose every workflow
  has finished go first (LRU among them), then active blocks by LRU.
- `pbkv-he`: `PBKVHEPolicy` (policy.py). Hierarchical eviction as published: retired blocks
  first, then active ones by the predictor's K-step lookahead reuse score.
- `pbkv`: `PBKVPolicy` (policy.py). `pbkv-he` plus conservative prefetch (only when the link
  is idle and the last iteration was decode-only, never evicting active cache).
- `pbkv-aggressive`: `PBKVAggressivePolicy` (policy.py). An ablation: prefetch every step, may
  evict any block scoring below the prefetched thread.
- `pbkv-ta`: `PBKVTimePolicy` (time_aware.py). agentrt's time-aware PBKV: blocks ranked by
  expected hits per second of residency, with dead-branch untagging and agent anchors; prefetch
  as `pbkv`. Options `tails`, `online` and `turns`.

Modules
- policy.py: the four published variants above.
- time_aware.py: PBKV-TA, built from the helpers below.
- timing.py: what PBKV-TA learns of agents' times (service times, gaps, tool waits), thread
  densities (`thread_density`), and dropped path tails (`dropped`, `Tail`; option `tails`).
- announced.py: announced tool times read as evidence against the learned tool waits.
- anchors.py: agents' anchor blocks (system prompt, tools) and the rate new threads read them.
- online_steps.py: K-step forecasts from agent transitions learned online, where the trained
  predictor knows nothing (option `online`; the learner is `policies/transitions.py`, shared
  with CacheSage).
- forecast_judge.py: per agent, whether the trained or the online forecast has been the better.
- turns.py: conversation turns inferred without workflow identity, and the follow-up hazard
  (option `turns`).
Options and their defaults are the constructors' (`agentrt policies --options` lists them).
"""

from agentrt.policies.pbkv.policy import PBKVAggressivePolicy, PBKVHEPolicy, PBKVLAEPolicy, PBKVPolicy
from agentrt.policies.pbkv.time_aware import PBKVTimePolicy

__all__ = ["PBKVAggressivePolicy", "PBKVHEPolicy", "PBKVLAEPolicy", "PBKVPolicy", "PBKVTimePolicy"]

"""The defaults every entry point shares, defined once.

`agentrt generate`, `agentrt import ag2`, `agentrt bench --workload`, `agentrt train --workload`
and `agentrt.simulate("NAME")` all generate (or import) with these values, so that
`agentrt generate swebench -o t.jsonl && agentrt bench --trace t.jsonl` replays exactly the calls
`agentrt bench --workload swebench` replays, under the same load and the same training split.

`agentrt bench` with no arguments ("the default run", docs/notes/results-details.md) is one fixed regime on top
of these: the mix workload on a quarter of the preset's KV memory, where eviction decides.
"""

from __future__ import annotations

WORKFLOWS = 200            # workflows in a generated workload
CONCURRENCY = 16           # closed loop: workflows at once (generated and imported traces)
SEED = 0
BLOCK_SIZE = 16            # tokens per hash id of a generated or imported trace
PRESET = "llama3.1-8b-h100"
SCHEDULER = "fcfs"
TRAIN_FRACTION = 0.25      # share of workflows held back when a policy learns offline

# `agentrt bench` with no --trace or --workload
RUN_WORKLOAD = "mix"
RUN_GPU_BLOCKS = 6430      # a quarter of the preset's KV memory (25,720 blocks of 16 tokens)
RUN_POLICIES = ("lru", "cachesage", "kvflow", "pbkv-lae", "pbkv", "pbkv-ta", "oracle", "belady-held", "belady",
                "infinite")
RUN_PLOT = "agentrt-bench.png"

VLLM_POLICIES = ("lru",)   # `agentrt bench --engine vllm`
API_POLICIES = ("lru", "cachesage", "pbkv-lae", "belady")   # `agentrt.simulate`

"""`hover`: multi-hop fact verification with dynamic loops (a PBKV workload).

Agents and control flow (the multi-hop retrieve-read-verify programs run on HoVer, e.g. DSPy's
multi-hop claim verification, Khattab et al. 2023, and Baleen, Khattab et al. 2021):
- decomposer: reads the claim, writes the first sub-queries.
- retriever (a tool-using agent): issues a `search` tool call (one call emits the query, the
  search runs as think time, the next call reads the passages); after reading it may spawn a
  new sub-query and search again (at most 3 searches per hop).
- reader: reads the passages the retriever kept and writes fact notes.
- verifier: reads the notes and decides: verdict (stop) or another hop with a follow-up
  question for the retriever. Never stops before hop 2, always by hop 4 (HoVer claims need 2 to
  4 hops).
Every agent keeps its thread across hops (ReAct-style history), so hop k extends hop k-1's prompt.

Hidden state: the claim's true hop count h in {2, 3, 4} with the HoVer train-split shares
(9,052 / 6,084 / 3,035 of 18,171 claims; Jiang et al. 2020) and a complexity in [0, 1] (guess)
that makes the retriever spawn more sub-queries. The verifier's stop logit is 2.5 (hop - h + 0.5)
plus content noise: it mostly stops at hop h, sometimes a hop early or late. Signals carry h,
the complexity and the decision the call leads to (stop, spawn).

Sizes: claims 15 to 45 tokens per hop (HoVer's 3/4-hop claims are multi-sentence; estimate from
the paper's examples); 5 passages per search (guess; DSPy's HoVer programs use k = 7) of 80 to 220
tokens each (introductions of the 2017 Wikipedia dump that HoVer uses; estimate); reader keeps 2
or 3 of them. System prompts with tool definitions 700 to 1,400 tokens (guess, typical of
DSPy/LangChain agent templates). Outputs: queries 20 to 60, notes 60 to 180, verdicts 30 to 110
tokens (guesses). Search tool time: `retrieval` from `workloads.tools` (median 0.3 s, guess:
BM25 or dense retrieval over 5 M passages; it was uniform 0.3 to 1.5 s). One uniform per draw as
before, so the workflows' structure and statistics are unchanged.
"""

from __future__ import annotations

from agentrt.workloads.base import Workload, WorkflowBuilder

HOPS = (2, 3, 4)
HOP_SHARES = (9052 / 18171, 6084 / 18171, 3035 / 18171)
PASSAGES_PER_SEARCH = 5
MAX_SEARCHES = 3


class HoverWorkload(Workload):
    name = "hover"
    summary = "multi-hop claim verification: decomposer, searching retriever, reader, verifier (2-4 hops)"
    system = {"decomposer": 900, "retriever": 1400, "reader": 700, "verifier": 1100}
    expected = {"calls_per_workflow": (10.0, 24.0), "prompt_tokens": (1500.0, 5000.0),
                "output_tokens": (40.0, 150.0), "reuse_within": (0.55, 0.9),
                "reuse_across": (0.05, 0.4)}

    def build(self, b: WorkflowBuilder) -> None:
        rng, wf = b.rng, b.workflow
        h = int(rng.choice(HOPS, p=HOP_SHARES))
        complexity = float(rng.uniform())
        state = {"hops": (h - 3) / 1.0, "complexity": 2 * complexity - 1}
        claim = (("claim", wf), int(rng.integers(15, 46)) * (h - 1))

        dec = b.call("decomposer", [self.anchor("decomposer"), claim],
                     int(rng.integers(40, 100)) + 20 * h, signal=b.semantic("decomposer", state))
        prev = dec
        for hop in range(1, 5):
            # retriever: search, read, maybe spawn a sub-query and search again
            if hop == 1:
                new = [self.anchor("retriever"), claim, b.output(dec)]
            else:
                new = [b.output(prev)]
            kept = []
            for s in range(MAX_SEARCHES):
                q = b.call("retriever", new, int(rng.integers(20, 61)), after=[prev],
                           signal=b.semantic("retriever", state, {"gap": (h - hop) / 2}))
                passages = (("passages", wf, hop, s),
                            sum(int(rng.integers(80, 221)) for _ in range(PASSAGES_PER_SEARCH)))
                spawn = b.event(-0.5 + 2.5 * complexity - 1.2 * s - 0.3 * hop)
                prev = b.call("retriever", [passages], int(rng.integers(40, 121)), after=[q],
                              think_ms=b.tool("retrieval"),
                              signal=b.semantic("retriever", state, {"spawn": spawn.feature}))
                kept.append((("kept", wf, hop, s), passages[1] * int(rng.integers(2, 4)) // 5))
                new = []
                if not spawn.happens:
                    break
            # reader: the kept passages of this hop
            new = ([self.anchor("reader"), claim] if hop == 1 else []) + kept
            read = b.call("reader", new, int(rng.integers(60, 181)), after=[prev],
                          signal=b.semantic("reader", state, {"gap": (h - hop) / 2}))
            # verifier: stop, or ask for another hop
            # hop 1 never stops and hop 4 always does (the program's bounds): clear logits there
            stop = b.event(2.5 * (hop - h + 0.5) if 2 <= hop <= 3 else (-4.0 if hop < 2 else 4.0))
            stops = hop == 4 or (hop >= 2 and stop.happens)
            new = ([self.anchor("verifier"), claim] if hop == 1 else []) + [b.output(read)]
            prev = b.call("verifier", new, int(rng.integers(30, 71)) + (40 if stops else 0),
                          after=[read],
                          signal=b.semantic("verifier", state, {"stop": stop.feature}))
            if stops:
                break

"""`financebench`: a static pipeline over long filings (a PBKV workload).

Agents and control flow, the same five calls in the same order in every workflow:
retriever (writes the search query) -> vector search over the filing as a tool -> analyst (reads
the filing's statements and the retrieved chunks, extracts the figures) -> calculator (writes the
arithmetic) -> the expression runs as a tool -> calculator (reads the result) -> writer (the
answer with its justification). No loops: this is the workload on which agent order is fully
predictable and only the sizes vary.

Shared documents: FinanceBench (Islam et al. 2023) asks 10,231 questions about 361 public filings
(10-K, 10-Q, 8-K, earnings reports), about 28 per filing. Each workflow draws its filing uniformly
from 361, so questions on the same filing meet by chance. The analyst's prompt is built
document-first, as long-document QA prompts are: system prompt, the filing's financial
statements section (the same tokens for every question on that filing: cross-workflow sharing
beyond the anchor), then the question-specific chunks and the question.

Hidden state: the question's reasoning type (FinanceBench's categories: information extraction,
numerical reasoning, logical reasoning; shares 0.4 / 0.4 / 0.2 are a guess) sets how much the
analyst and the calculator write. Signals carry the type.

Sizes: filing statements section 6k to 16k tokens (guess: the income statement, balance sheet,
cash-flow statement and their notes of a 10-K, which runs to 50k-150k tokens in all); retrieved
chunks 3 to 6 of 300 to 600 tokens (guess: common RAG chunking); questions 20 to 90 tokens
(estimate from the open-source sample's questions). System prompts 600 to 1,500 tokens (guess).
Tool times from `workloads.tools`: the vector search is `retrieval` (median 0.3 s), the
calculator's Python `code_exec` (median 1.5 s with the interpreter's start); they were uniform 0.2
to 0.8 s and 0.1 to 0.5 s. One uniform per draw as before: structure and statistics unchanged.
"""

from __future__ import annotations

from agentrt.workloads.base import Workload, WorkflowBuilder

FILINGS = 361
TYPES = ("extraction", "numerical", "logical")
TYPE_SHARES = (0.4, 0.4, 0.2)
# (analyst output, calculator output) token ranges by reasoning type (guesses)
OUTPUTS = {"extraction": ((80, 200), (20, 60)), "numerical": ((150, 350), (80, 200)),
           "logical": ((200, 450), (40, 120))}


class FinancebenchWorkload(Workload):
    name = "financebench"
    summary = "static pipeline over long filings: retriever, analyst, calculator, writer"
    system = {"retriever": 700, "analyst": 1500, "calculator": 900, "writer": 600}
    expected = {"calls_per_workflow": (5.0, 5.0), "prompt_tokens": (2500.0, 6000.0),
                "output_tokens": (50.0, 200.0), "reuse_within": (0.02, 0.2),
                "reuse_across": (0.1, 0.6)}

    def build(self, b: WorkflowBuilder) -> None:
        rng, wf = b.rng, b.workflow
        kind = str(rng.choice(TYPES, p=TYPE_SHARES))
        filing = int(rng.integers(FILINGS))
        state = {f"type:{t}": float(t == kind) for t in TYPES}
        question = (("question", wf), int(rng.integers(20, 91)))
        (a_lo, a_hi), (c_lo, c_hi) = OUTPUTS[kind]

        q = b.call("retriever", [self.anchor("retriever"), question], int(rng.integers(20, 61)),
                   signal=b.semantic("retriever", state))
        statements = (("filing", filing), 6000 + (filing * 7919) % 10_001)
        chunks = (("chunks", wf), sum(int(rng.integers(300, 601)) for _ in range(int(rng.integers(3, 7)))))
        ana = b.call("analyst", [self.anchor("analyst"), statements, chunks, question],
                     int(rng.integers(a_lo, a_hi + 1)), after=[q], think_ms=b.tool("retrieval"),
                     signal=b.semantic("analyst", state))
        calc = b.call("calculator", [self.anchor("calculator"), question, b.output(ana)],
                      int(rng.integers(c_lo, c_hi + 1)), after=[ana],
                      signal=b.semantic("calculator", state))
        result = (("calc-result", wf), int(rng.integers(10, 60)))
        calc2 = b.call("calculator", [result], int(rng.integers(20, 80)), after=[calc],
                       think_ms=b.tool("code_exec"), signal=b.semantic("calculator", state))
        b.call("writer", [self.anchor("writer"), question, b.output(ana), b.output(calc2)],
               int(rng.integers(60, 250)), after=[calc2], signal=b.semantic("writer", state))

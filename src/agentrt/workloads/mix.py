"""`mix`: several workload types at once, as a shared serving deployment sees them.

Each workflow draws its type with the generator's seeded rng, uniformly over the eight benchmark
generators (hover, swebench, financebench, mmlu, mtbench, gaia, gsm8k, humaneval; uniform shares
are a guess: no public trace says how a deployment's traffic splits). The workflow is then built
by that type's generator unchanged; its id gets the type appended (`mix-12-gaia`, unique since the
index is) and its agents are named `type/agent` (`gaia/orchestrator`), because two applications
on one deployment are different agents even where their roles share a name. Anchors stay per
type, so the only sharing across types is none, as between different applications.
"""

from __future__ import annotations

from agentrt.workloads.base import GenConfig, Workload, WorkflowBuilder, scale_note

TYPES = ("hover", "swebench", "financebench", "mmlu", "mtbench", "gaia", "gsm8k", "humaneval")


class MixWorkload(Workload):
    name = "mix"
    summary = "the eight benchmark workloads at once, a type drawn per workflow"
    expected = {"calls_per_workflow": (6.0, 20.0), "prompt_tokens": (2500.0, 12000.0),
                "output_tokens": (60.0, 300.0), "reuse_within": (0.4, 0.95),
                "reuse_across": (0.02, 0.4)}

    def __init__(self, types: tuple[str, ...] = TYPES) -> None:
        from agentrt.workloads.registry import get_workload
        self.types = types
        self.children = {t: get_workload(t) for t in types}

    def build(self, b: WorkflowBuilder) -> None:
        kind = self.types[int(b.rng.integers(len(self.types)))]
        b.workflow = f"{b.workflow}-{kind}"
        start = len(b.calls)
        self.children[kind].build(b)
        for c in b.calls[start:]:
            c.agent = f"{kind}/{c.agent}"

    def header(self, cfg: GenConfig):
        h = super().header(cfg)
        h.description = f"{self.summary}: {', '.join(self.types)}{scale_note(cfg)}"
        return h

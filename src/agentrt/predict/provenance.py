"""What a saved predictor was trained on, so a bench never scores workflows the predictor has seen.

`agentrt train` records a provenance dict in the predictor file: the trace (path or generated
workload), the SHA-256 of the trace file's bytes, its workflow count, the training fraction and
the number of training workflows (the first ones in order of first appearance, the split
`agentrt bench` holds back), and a content digest of every training workflow. A workflow's digest
covers its id and every call's index, agent, tenant, lengths, hash ids and signal, so a
bench can tell which of its workflows a predictor was trained on wherever the trace came from (a
copy, a compressed file, the same workload generated again with more workflows).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

from agentrt.trace.schema import Call

PROVENANCE_FORMAT = 1
DIGEST_CHARS = 16     # 64 bits of SHA-256 per workflow: collisions are negligible at trace sizes


def workflow_digests(calls: Iterable[Call]) -> list[str]:
    """The content digest of each workflow, in order of first appearance."""
    open_: dict[str, "hashlib._Hash"] = {}
    order: dict[str, int] = {}       # the trace reader refuses a workflow id reused after its end
    done: dict[int, str] = {}
    for c in calls:
        h = open_.get(c.workflow)
        if h is None:
            order[c.workflow] = len(order)
            h = open_[c.workflow] = hashlib.sha256(c.workflow.encode())
        h.update(repr((c.call, c.agent, c.tenant, c.input_length, c.output_length, c.hash_ids,
                       c.signal)).encode())
        if c.last:
            done[order[c.workflow]] = open_.pop(c.workflow).hexdigest()[:DIGEST_CHARS]
    for w, h in open_.items():
        done[order[w]] = h.hexdigest()[:DIGEST_CHARS]
    return [done[i] for i in sorted(done)]


def digest_of(digests: list[str]) -> str:
    """One fingerprint of a list of workflow digests (order matters)."""
    return hashlib.sha256("\n".join(digests).encode()).hexdigest()


def file_sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def make_provenance(trace: str, path: str | Path, workflows: int, train_fraction: float,
                    train_digests: list[str]) -> dict:
    """The provenance record `agentrt train` saves with a predictor."""
    return {"format": PROVENANCE_FORMAT, "trace": trace, "trace_sha256": file_sha256(path),
            "workflows": workflows, "train_fraction": train_fraction,
            "train_workflows": len(train_digests), "train_sha256": digest_of(train_digests),
            "train_digests": list(train_digests)}


def read_provenance(path: str | Path) -> dict | None:
    """The provenance recorded in a predictor file; None if it records none (an older file)."""
    from agentrt.predict.io import load_dict
    return provenance_in(load_dict(path))


def provenance_in(saved: dict) -> dict | None:
    """The provenance in a predictor file's dict (`io.load_dict`); None if it records none."""
    prov = saved.get("provenance")
    return prov if isinstance(prov, dict) and prov.get("train_digests") is not None else None

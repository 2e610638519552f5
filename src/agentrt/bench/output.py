"""A bench result written for people and programs: the `--json` document and the `--csv` table.

The JSON document is versioned (`schema_version`) and described by docs/results-schema.json
(docs/output.md): hit rates are fractions of prompt tokens (0.43, not 43%), times in seconds,
throughput in tokens per second. The CSV has one row per policy with the same metrics and units
(nested values flattened to dotted columns), then the run's settings, so rows of several runs
can be concatenated.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from agentrt.errors import AgentrtError

# Bump on a change a reader must know about: a field removed or renamed, or a unit changed.
# Adding a field keeps the version (readers must ignore fields they do not know).
SCHEMA_VERSION = "1.0"

# the run's settings repeated on every CSV row (config keys)
CSV_SETTINGS = ("preset", "gpu_blocks", "host_blocks", "block_size", "concurrency", "time_scale",
                "scheduler", "seed")


def _flatten(prefix: str, value, out: dict) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _flatten(f"{prefix}.{k}", v, out)
    elif isinstance(value, list):
        out[prefix] = json.dumps(value)
    else:
        out[prefix] = value


def records(doc: dict) -> list[dict]:
    """One flat dict per policy, in the order run: {"policy": name, metric: value, ...}. Bounds
    carry `bound` (and `offline`) = True and None for the timings they do not have."""
    out = []
    for name, r in doc["results"].items():
        row: dict = {"policy": name}
        for k, v in r.items():
            _flatten(k, v, row)
        row.setdefault("bound", False)
        row.setdefault("offline", False)
        out.append(row)
    return out


def csv_rows(doc: dict) -> tuple[list[str], list[dict]]:
    """(columns, rows) of the CSV: policy, metrics (union over policies, first-seen order), then
    the trace label, schema version and the run's settings."""
    rows = records(doc)
    cols: list[str] = []
    for r in rows:
        cols += [k for k in r if k not in cols]
    cfg = doc.get("config", {})
    extra = {"trace": doc.get("trace"), "schema_version": doc.get("schema_version", SCHEMA_VERSION)}
    extra.update({k: cfg.get(k) for k in CSV_SETTINGS})
    extra["train_workflows"] = (cfg.get("train") or {}).get("workflows") or 0
    for r in rows:
        r.update(extra)
    return cols + [k for k in extra if k not in cols], rows


def _write(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    except OSError as e:
        raise AgentrtError(f"cannot write {path}: {e.strerror or e}") from None


def write_json(doc: dict, path: str | Path) -> Path:
    """The document as `--json` writes it (`schema_version` first)."""
    doc = {"schema_version": doc.get("schema_version", SCHEMA_VERSION), **doc}
    _write(Path(path), json.dumps(doc, indent=2) + "\n")
    return Path(path)


def write_csv(doc: dict, path: str | Path) -> Path:
    import io
    cols, rows = csv_rows(doc)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in cols})
    _write(Path(path), buf.getvalue())
    return Path(path)

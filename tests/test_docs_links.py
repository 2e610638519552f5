"""Every relative link in the README and docs/ reaches an existing file, and its `#anchor` a
heading of that file (GitHub's rule: lower case, punctuation other than `-` and `_` dropped,
spaces as `-`). Pages moved between docs/ and docs/notes/ broke such links before."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
LINK = re.compile(r"\]\(([^)#\s]*)(#[^)\s]+)?\)")
HEADING = re.compile(r"#+\s+(.*)")


def slug(title: str) -> str:
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    out: set[str] = set()
    fenced = False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        m = None if fenced else HEADING.match(line)
        if m:
            out.add(slug(m.group(1)))
    return out


def test_slug_follows_githubs_rule():
    assert slug("Retention hints over tool calls: vLLM's `kv.retain`") == \
        "retention-hints-over-tool-calls-vllms-kvretain"
    assert slug("8. Schedulers behind the admission gate") == "8-schedulers-behind-the-admission-gate"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(page: Path):
    bad = []
    for n, line in enumerate(page.read_text().splitlines(), 1):
        for m in LINK.finditer(line):
            target, anchor = m.group(1), m.group(2)
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            path = (page.parent / target).resolve() if target else page
            if not path.exists():
                bad.append(f"{page.name}:{n}: {target}: no such file")
            elif anchor and path.suffix == ".md" and anchor[1:] not in anchors(path):
                bad.append(f"{page.name}:{n}: {target}{anchor}: no such heading")
    assert not bad, "\n".join(bad)

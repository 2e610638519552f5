"""The README's set-up lines, for .ci/run: `python3 .ci/readme_commands.py main|test [README]`.

A set-up line is the one-line indented code block that follows a marker comment
`<!-- setup:NAME ... -->` in README.md (blank lines between them allowed). Prints that line as
written. Exits 2, with a message, when the marker is missing or repeated, or when what follows it
is not a one-line indented code block, so .ci/run can never run something else than the README
shows. Standard library only: it runs before any virtual environment exists.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

MARKER = re.compile(r"^<!--\s*setup:([\w-]+)\b.*-->\s*$")


class ReadmeError(ValueError):
    """The README does not hold the asked-for set-up line in the expected shape."""


def setup_lines(text: str) -> dict[str, str]:
    """{marker name: its command line}, for every marker in `text`."""
    lines = text.splitlines()
    out: dict[str, str] = {}
    for i, line in enumerate(lines):
        m = MARKER.match(line.strip())
        if not m:
            continue
        name = m.group(1)
        if name in out:
            raise ReadmeError(f"setup:{name} appears more than once")
        j = i + 1
        while j < len(lines) and not lines[j].strip():
            j += 1
        block = []
        while j < len(lines) and (lines[j].startswith("    ") or lines[j].startswith("\t")):
            block.append(lines[j])
            j += 1
        if len(block) != 1:
            raise ReadmeError(f"setup:{name} must be followed by a one-line indented code block, "
                              f"found {len(block)} lines")
        out[name] = block[0].strip()
    return out


def setup_line(text: str, name: str) -> str:
    lines = setup_lines(text)
    if name not in lines:
        raise ReadmeError(f"no <!-- setup:{name} --> marker in the README")
    return lines[name]


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2):
        print("usage: readme_commands.py NAME [README]", file=sys.stderr)
        return 2
    readme = Path(argv[1]) if len(argv) == 2 else Path(__file__).resolve().parents[1] / "README.md"
    try:
        print(setup_line(readme.read_text(encoding="utf-8"), argv[0]))
    except (OSError, ReadmeError) as e:
        print(f"readme_commands.py: {readme}: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

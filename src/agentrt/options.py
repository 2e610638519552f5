"""Command-line option values: `--set KEY=VALUE` strings turned into Python values."""

from __future__ import annotations


def parse_value(text: str):
    """'true'/'false' -> bool, then int, then float, else the string itself."""
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text

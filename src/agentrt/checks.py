"""Checks of the values and paths a command is given, before any work starts.

The base of every command line and Python entry point: a number that must be positive, a
`--set` value's text turned into a Python value, a file to read (it exists, it is no directory)
and a file to write (its folder is writable, its suffix right), each raising `AgentrtError`
that names the option as the user wrote it: `--gpu-blocks` on the command line, `gpu_blocks`
from Python (`flag`). Imports nothing of agentrt but its errors, so every layer can use it.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from agentrt.errors import AgentrtError


def flag(name: str, cli: bool) -> str:
    """How an error names option `name` (a Python keyword): `--gpu-blocks` or `gpu_blocks`."""
    return "--" + name.replace("_", "-") if cli else name


def positive(value: float | None, name: str, cli: bool, allow_zero: bool = False) -> None:
    """None passes; otherwise a finite number > 0 (>= 0 with `allow_zero`)."""
    if value is None:
        return
    ok = math.isfinite(value) and (value >= 0 if allow_zero else value > 0)
    if not ok:
        raise AgentrtError(f"{flag(name, cli)} must be {'>=' if allow_zero else '>'} 0, got {value}")


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


def input_file(path: str | os.PathLike, what: str) -> Path:
    """A file to read: it exists and is no directory."""
    p = Path(path)
    if p.is_dir():
        raise AgentrtError(f"{what} {p}: is a directory, not a file")
    if not p.exists():
        raise AgentrtError(f"{what} {p}: no such file")
    return p


def output_file(path: str | os.PathLike, what: str, suffixes: tuple[str, ...] = ()) -> Path:
    """A file to write (its folders are created): not a directory, under a writable folder, with
    one of `suffixes` (lower case, with the dot) when given."""
    try:
        return _output_file(Path(path), str(path), what, suffixes)
    except OSError as e:             # a name too long, a path the OS refuses to look up
        raise AgentrtError(f"{what} {path}: cannot be written ({e.strerror or e})") from None


def _output_file(p: Path, path: str, what: str, suffixes: tuple[str, ...]) -> Path:
    if p.is_dir() or str(path).endswith(("/", os.sep)):
        raise AgentrtError(f"{what} {p}: is a directory; give a file name")
    if suffixes and p.suffix.lower() not in suffixes:
        want = suffixes[0] if len(suffixes) == 1 else f"one of {', '.join(suffixes)}"
        got = f"not '{p.suffix}'" if p.suffix else "it has none"
        raise AgentrtError(f"{what} {p}: the file name must end in {want} ({got})")
    parent = next((d for d in p.absolute().parents if d.exists()), None)
    if parent is not None and not parent.is_dir():
        raise AgentrtError(f"{what} {p}: {parent} is a file, not a directory")
    if parent is not None and not os.access(parent, os.W_OK | os.X_OK):
        raise AgentrtError(f"{what} {p}: cannot write under {parent} (permission denied)")
    if parent is not None and parent == p.absolute().parent and not os.path.lexists(p):
        # what permissions do not tell (a name too long, a file system that refuses files, as
        # /proc): try it, and leave nothing behind
        try:
            with open(p, "x"):
                pass
        except OSError as e:
            raise AgentrtError(f"{what} {p}: cannot be written ({e.strerror or e})") from None
        p.unlink(missing_ok=True)
    return p

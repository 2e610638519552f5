"""User-facing errors.

Every error a user can cause (a malformed trace line, an unknown policy name, a bad option) is an
`AgentrtError`. The CLI prints its one-line message and exits non-zero, with no traceback; anything
else is a bug and keeps its traceback.
"""

from __future__ import annotations


class AgentrtError(Exception):
    """An error caused by input or configuration, reported to the user in one line."""


class TraceError(AgentrtError):
    """A trace line that breaks the format: names the file, the line number and the field."""

    def __init__(self, path: str, line: int, field: str | None, message: str) -> None:
        self.path = path
        self.line = line
        self.field = field
        self.message = message
        where = f"{path}:{line}"
        what = f"field '{field}': {message}" if field else message
        super().__init__(f"{where}: {what}")


def unknown_name(kind: str, name: str, valid: list[str]) -> AgentrtError:
    """The standard error for an unknown policy, preset, workload... listing the valid names."""
    plural = kind[:-1] + "ies" if kind.endswith("y") else kind + "s"
    return AgentrtError(f"unknown {kind} '{name}'; valid {plural}: {', '.join(sorted(valid))}")


class TraceWarning(UserWarning):
    """A trace that reads, with a caveat the user should see (the CLI prints it as `warning: ...`)."""


class SetupWarning(UserWarning):
    """An optional dependency is missing and a documented fallback runs instead (the CLI prints it
    as `warning: ...`)."""

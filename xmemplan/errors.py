"""One error hierarchy and the exit codes of the `xmemplan` command.

The library raises these; only the CLI boundary (`xmemplan.cli.main`) turns them into
`Error: <what happened>. <what to do>` on stderr and an exit code. Tracebacks are shown only
with `--debug`.

Exit codes (documented in docs/cli.md):

| code | meaning |
|-----:|---------|
| 0 | success |
| 1 | internal error (a bug: please report it with `--debug` output) |
| 2 | usage error: a flag or value the command cannot use (bad unit, unknown name) |
| 3 | input error: a trace, profile, plan or catalog file that cannot be read as stated |
| 4 | not available: an optional dependency or hardware this mode needs is missing |
| 5 | check failed: `validate` measured more error than `--tolerance`, or a `--strict`
      run met skips |
| 130 | interrupted (Ctrl-C) |
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_USAGE = 2
EXIT_INPUT = 3
EXIT_NOT_AVAILABLE = 4
EXIT_CHECK_FAILED = 5
EXIT_INTERRUPTED = 130


class XmemplanError(Exception):
    """Base of every error the library raises on purpose.

    `message` says what happened, `hint` what to do about it. `exit_code` is what the CLI
    exits with.
    """

    exit_code = EXIT_INTERNAL

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def render(self) -> str:
        text = self.message.rstrip(".") + "."
        if self.hint:
            hint = self.hint.rstrip(".")
            end = "" if hint.endswith(("?", "!")) else "."
            text += " " + hint[:1].upper() + hint[1:] + end
        return text


class UsageError(XmemplanError):
    """A flag value the command cannot use (unparseable unit, unknown name, bad range)."""

    exit_code = EXIT_USAGE


class InputError(XmemplanError):
    """A file that cannot be read as stated: names the file, line and field when known."""

    exit_code = EXIT_INPUT

    def __init__(
        self,
        message: str,
        *,
        path: str | Path | None = None,
        line: int | None = None,
        field: str | None = None,
        hint: str | None = None,
    ) -> None:
        self.path = str(path) if path is not None else None
        self.line = line
        self.field = field
        where = []
        if self.path is not None:
            where.append(self.path if line is None else f"{self.path}:{line}")
        if field is not None:
            where.append(f"field '{field}'")
        prefix = ", ".join(where)
        super().__init__(f"{prefix}: {message}" if prefix else message, hint)


class NotAvailableError(XmemplanError):
    """An optional dependency or a piece of hardware that this mode needs is missing."""

    exit_code = EXIT_NOT_AVAILABLE


class CheckFailedError(XmemplanError):
    """A check the user asked for did not pass (validate tolerance, strict mode)."""

    exit_code = EXIT_CHECK_FAILED


@dataclass(frozen=True)
class Skip:
    """One input item that was skipped, with where and why (counted and reported)."""

    path: str
    line: int | None
    reason: str

    def where(self) -> str:
        return self.path if self.line is None else f"{self.path}:{self.line}"

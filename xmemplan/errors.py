"""One error hierarchy and the exit codes of the `xmemplan` command.

The library raises these; only the CLI boundary (`xmemplan.cli.main`) turns them into
`Error: <what happened>. <what to do>` on stderr and an exit code. Tracebacks are shown only
with `--debug`. `ExitCode` is the one table of exit codes: docs/cli.md is generated from it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path


class ExitCode(IntEnum):
    """Exit codes; each member's docstring line is its documented meaning."""

    OK = 0
    INTERNAL = 1
    USAGE = 2
    INPUT = 3
    NOT_AVAILABLE = 4
    CHECK_FAILED = 5
    INTERRUPTED = 130
    TERMINATED = 143


EXIT_MEANINGS: dict[ExitCode, str] = {
    ExitCode.OK: "success",
    ExitCode.INTERNAL: "internal error (a bug: rerun with `--debug` and report the traceback)",
    ExitCode.USAGE: "usage error: a flag or value the command cannot use (bad unit, unknown "
    "name, out of range, an output that would overwrite an input)",
    ExitCode.INPUT: "input error: a trace, profile, plan or catalog file that cannot be read "
    "as stated, or a `--strict` run that met skipped lines or files",
    ExitCode.NOT_AVAILABLE: "not available: an optional dependency or hardware this mode "
    "needs is missing",
    ExitCode.CHECK_FAILED: "check failed: `validate` measured more error than `--tolerance`",
    ExitCode.INTERRUPTED: "interrupted (Ctrl-C)",
    ExitCode.TERMINATED: "terminated (SIGTERM); as after Ctrl-C, no output is left "
    "half-written",
}


class XmemplanError(Exception):
    """Base of every error the library raises on purpose.

    `message` says what happened, `hint` what to do about it. `exit_code` is what the CLI
    exits with.
    """

    exit_code: ExitCode = ExitCode.INTERNAL

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

    exit_code = ExitCode.USAGE


class InputError(XmemplanError):
    """A file that cannot be read as stated: names the file, line and field when known."""

    exit_code = ExitCode.INPUT

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

    exit_code = ExitCode.NOT_AVAILABLE


class CheckFailedError(XmemplanError):
    """A check the user asked for did not pass (validate tolerance, strict mode)."""

    exit_code = ExitCode.CHECK_FAILED


@dataclass(frozen=True)
class Skip:
    """One input item that was skipped, with where and why (counted and reported)."""

    path: str
    line: int | None
    reason: str

    def where(self) -> str:
        return self.path if self.line is None else f"{self.path}:{self.line}"


# Control characters (C0 but newline and tab, DEL, C1) and lone surrogates (file names that
# are not UTF-8 carry them as surrogateescape \udc80-\udcff) never reach a terminal raw: a
# trace id holding ESC [ 2 J would clear the screen, ESC ] 0 ; retitle it, and a surrogate
# cannot be encoded at all.
_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")


def _escape(m: re.Match[str]) -> str:
    c = ord(m.group())
    if 0xDC80 <= c <= 0xDCFF:  # a byte that was not UTF-8, as os.fsdecode kept it
        return f"\\x{c - 0xDC00:02x}"
    return f"\\x{c:02x}" if c <= 0xFF else f"\\u{c:04x}"


def printable(text: str) -> str:
    """`text` with control characters and lone surrogates shown as escapes (\\x1b, \\xff)."""
    return _UNPRINTABLE.sub(_escape, text) if _UNPRINTABLE.search(text) else text

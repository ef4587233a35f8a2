"""Write docs/cli.md from the commands' own --help (a test checks it is current).

    python docs/make_cli_reference.py
"""

from __future__ import annotations

import io
import os
import sys
from contextlib import redirect_stdout
from pathlib import Path

OUT = Path(__file__).with_name("cli.md")
COMMANDS = ["", "hitrate", "size", "validate", "catalog"]

HEADER = """# CLI reference

Generated from `--help` by `python docs/make_cli_reference.py`; `tests/test_docs.py` fails
when it is stale.

## Exit codes

| code | meaning |
|-----:|---------|
| 0 | success |
| 1 | internal error (a bug: rerun with `--debug` and report the traceback) |
| 2 | usage error: a flag or value the command cannot use (bad unit, unknown name) |
| 3 | input error: a trace, profile, plan or catalog file that cannot be read as stated |
| 4 | not available: an optional dependency or hardware this mode needs is missing |
| 5 | check failed: `validate` measured more error than `--tolerance` |
| 130 | interrupted |

Results go to stdout; progress, notes, warnings and errors to stderr.
"""


def help_text(command: str) -> str:
    from xmemplan.cli.main import run

    os.environ["COLUMNS"] = "100"
    os.environ["NO_COLOR"] = "1"
    buf = io.StringIO()
    args = ([command] if command else []) + ["--help"]
    with redirect_stdout(buf):
        run(args)
    return buf.getvalue().rstrip() + "\n"


def render() -> str:
    parts = [HEADER]
    for cmd in COMMANDS:
        title = f"xmemplan {cmd}".strip()
        parts.append(f"\n## `{title}`\n\n```text\n{help_text(cmd)}```\n")
    return "".join(parts)


if __name__ == "__main__":
    OUT.write_text(render())
    sys.stdout.write(f"wrote {OUT}\n")

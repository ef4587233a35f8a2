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
COMMANDS = ["", "plan", "compare", "hitrate", "size", "validate", "calibrate", "export", "catalog"]

HEADER = """# CLI reference

Generated from `--help` by `python docs/make_cli_reference.py`; `tests/test_docs.py` fails
when it is stale.

## Exit codes

{exit_codes}

Results go to stdout; progress, notes, warnings and errors to stderr.
Notes, warnings and errors wrap at the terminal's width at spaces only. When the reader of
stdout goes away early (`| head`), the rest of the output is dropped and the command still
ends with its own exit code.
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


def exit_code_table() -> str:
    from xmemplan.errors import EXIT_MEANINGS

    rows = ["| code | meaning |", "|-----:|---------|"]
    rows += [f"| {int(code)} | {text} |" for code, text in EXIT_MEANINGS.items()]
    return "\n".join(rows)


def render() -> str:
    parts = [HEADER.format(exit_codes=exit_code_table())]
    for cmd in COMMANDS:
        title = f"xmemplan {cmd}".strip()
        parts.append(f"\n## `{title}`\n\n```text\n{help_text(cmd)}```\n")
    return "".join(parts)


if __name__ == "__main__":
    OUT.write_text(render())
    sys.stdout.write(f"wrote {OUT}\n")

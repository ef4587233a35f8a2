"""Golden terminal output of each command at 80 and 120 columns.

    python tests/golden/make_golden.py          # rewrite every golden file
    python tests/golden/make_golden.py --check  # exit 1 when one is stale (what the test does)

Each case runs `xmemplan ARGS` in-process with COLUMNS set and NO_COLOR, and stores stdout
and stderr. Cases whose figures are measured (validate's load times) have their digits
reduced to their words, so the golden file pins what is said, not the machine's speed.
"""

from __future__ import annotations

import io
import os
import re
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
WIDTHS = (80, 120)

# name, arguments, mask digits
CASES: list[tuple[str, list[str], bool]] = [
    ("hitrate", ["hitrate", "examples/traces/"], False),
    ("hitrate-capacity", ["hitrate", "examples/traces/", "--capacity", "100k,1M", "--tiers",
                          "HBM=200k,DRAM=2M", "--model", "qwen3-30b-a3b", "--idle", "5m"], False),
    ("size", ["size", "--ttft-slo", "500ms"], False),
    ("validate", ["validate", "--backend", "xmem", "--emulate", "--sessions", "1", "--rounds",
                  "2", "--prompt-tokens", "2048", "--growth-tokens", "512"], True),
    ("catalog", ["catalog"], False),
]


def run_case(args: list[str], width: int, mask: bool) -> str:
    from xmemplan.cli.main import run

    saved = {k: os.environ.get(k) for k in ("COLUMNS", "NO_COLOR")}
    os.environ["COLUMNS"] = str(width)
    os.environ["NO_COLOR"] = "1"
    out, err = io.StringIO(), io.StringIO()
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        with redirect_stdout(out), redirect_stderr(err):
            code = run(list(args))
    finally:
        os.chdir(cwd)
        # later tests in the same process must not inherit this case's terminal width
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    body = "== stdout ==\n" + out.getvalue() + "== stderr ==\n" + err.getvalue()
    return f"$ xmemplan {' '.join(args)}  (COLUMNS={width}, exit {code})\n" + body


def masked(text: str) -> str:
    """The words of `text` without its measured figures or the layout they change."""
    words = re.sub(r"[0-9][0-9.,%]*", "#", text)
    words = re.sub(r"[\u2500-\u257f\s]+", " ", words)
    return "\n".join(words.split(" ")) + "\n"


def golden_text(text: str, mask: bool) -> str:
    """What the golden file holds: the output, or for measured cases its words only."""
    if not mask:
        return text
    head, rest = text.split("\n", 1)
    return head + "\n" + masked(rest)


def path_for(name: str, width: int) -> Path:
    return HERE / f"{name}.{width}.txt"


def main() -> int:
    check = "--check" in sys.argv
    stale = []
    for name, args, mask in CASES:
        for width in WIDTHS:
            text = golden_text(run_case(args, width, mask), mask)
            p = path_for(name, width)
            if check:
                if not p.exists() or p.read_text() != text:
                    stale.append(p.name)
            else:
                p.write_text(text)
                print(f"wrote {p.relative_to(ROOT)}")
    if stale:
        print("stale golden files: " + ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

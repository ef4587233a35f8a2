"""Terminal output at 80 and 120 columns: matches the golden files, and no value is cut.

Regenerate after an intended change with `python tests/golden/make_golden.py`.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "golden"))
import make_golden  # noqa: E402

PARAMS = [(name, args, mask, w) for name, args, mask in make_golden.CASES
          for w in make_golden.WIDTHS]


@pytest.mark.parametrize("name, args, mask, width", PARAMS,
                         ids=[f"{p[0]}-{p[3]}" for p in PARAMS])
def test_output_fits_and_matches_golden(name, args, mask, width, monkeypatch):
    text = make_golden.run_case(args, width, mask)
    stdout = text.split("== stdout ==\n", 1)[1].split("== stderr ==\n", 1)[0]
    assert "exit 0)" in text.splitlines()[0], text
    for line in stdout.splitlines():
        assert len(line) <= width, f"wider than {width}: {line!r}"
        assert "…" not in line, f"a value was cut: {line!r}"
        # every bordered table row closes: the terminal did not crop the right edge
        if line[:1] in "┏┃┡│└":
            assert line.rstrip()[-1:] in ("┓", "┃", "┩", "│", "┘"), f"cropped: {line!r}"
    stderr = text.split("== stderr ==\n", 1)[1]
    for line in stderr.splitlines():  # notes wrap at spaces; only one over-long word may stick out
        assert len(line) <= width or " " not in line.strip(), f"wider than {width}: {line!r}"
    # A number split over two table rows would show as digits ending one cell line and
    # starting the same cell on the next; whole numbers never end a line with ',' inside a cell.
    assert not re.search(r"\d,\s*│\n", stdout)
    golden = make_golden.path_for(name, width)
    assert golden.exists(), f"run python tests/golden/make_golden.py to create {golden.name}"
    assert make_golden.golden_text(text, mask) == golden.read_text(), (
        f"{golden.name} differs: run python tests/golden/make_golden.py if the change is meant"
    )

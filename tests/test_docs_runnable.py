"""The docs run as written: every fenced block marked runnable (```sh runnable) in README.md
and docs/*.md is run with bash, each line a command, and must exit 0; every relative link
and every docs/ path the README names must exist.

Blocks run in a scratch folder laid out like the repository (examples/, and ../shared when
it is checked out beside the project: a block naming ../shared skips without it), with the
xmemplan of this interpreter first on PATH.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\S*)(.*)$")


def runnable_blocks() -> list[tuple[str, str]]:
    """(where, text) of each runnable block."""
    out = []
    for path in DOCS:
        lines = path.read_text().splitlines()
        i = 0
        while i < len(lines):
            m = FENCE.match(lines[i])
            if m and "runnable" in m.group(2).split():
                start = i + 1
                j = start
                while not lines[j].startswith("```"):
                    j += 1
                out.append((f"{path.relative_to(ROOT)}:{start}", "\n".join(lines[start:j])))
                i = j
            elif m:  # another fence: skip to its end
                i += 1
                while i < len(lines) and not lines[i].startswith("```"):
                    i += 1
            i += 1
    return out


BLOCKS = runnable_blocks()


def test_there_are_runnable_blocks() -> None:
    assert any(w.startswith("README.md") for w, _ in BLOCKS)
    # the README's main job is `plan` on the shipped examples, runnable
    assert any("xmemplan plan examples/traces/" in text for w, text in BLOCKS
               if w.startswith("README.md"))


@pytest.mark.parametrize(("where", "text"), BLOCKS, ids=[w for w, _ in BLOCKS])
def test_runnable_block(where: str, text: str, tmp_path: Path) -> None:
    shared = ROOT.parent / "shared"
    if "../shared" in text and not shared.is_dir():
        pytest.skip(f"{where} reads ../shared, which is not checked out here")
    pytest.importorskip("matplotlib")  # `plan` draws the report's charts
    work = tmp_path / "work"
    work.mkdir()
    (work / "examples").symlink_to(ROOT / "examples")
    if shared.is_dir():
        (tmp_path / "shared").symlink_to(shared)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}"
           f"{os.environ.get('PATH', '')}", "NO_COLOR": "1", "COLUMNS": "100"}
    r = subprocess.run(["bash", "-euo", "pipefail", "-c", text], cwd=work, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"{where} failed ({r.returncode}):\n{r.stdout[-2000:]}\n" \
                              f"{r.stderr[-2000:]}"


LINK = re.compile(r"\]\(([^)\s]+)\)")


@pytest.mark.parametrize("path", DOCS, ids=[str(p.relative_to(ROOT)) for p in DOCS])
def test_links_resolve(path: Path) -> None:
    text = path.read_text()
    missing = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        if not (path.parent / target.split("#")[0]).exists():
            missing.append(target)
    if path.name == "README.md":  # the README names docs as `docs/NAME.md`
        missing += [d for d in re.findall(r"`(docs/[\w./-]+)`", text) if not (ROOT / d).exists()]
    assert not missing, f"{path.name}: {missing}"

"""Where a document came from: the tool's version, the exact command, and a hash of every
input file, so that a plan (or profile, or hitrate report) can be traced back to its
traffic. `ARGV` is set by the CLI (`xmemplan.cli.main.run`) for the run in progress."""

from __future__ import annotations

import hashlib
import shlex
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

ARGV: list[str] = []  # the arguments of the command being run (after `xmemplan`)
MAX_FILES = 10_000  # files hashed per document; past them, counted and named unhashed
MAX_BYTES = 20e9  # bytes hashed per document (sha256 at ~1 GB/s: 20 s at worst)


def _files(p: Path) -> Iterable[Path]:
    if p.is_dir():
        yield from sorted(q for q in p.rglob("*") if q.is_file())
    elif p.exists():
        yield p


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def provenance(inputs: Sequence[Path | str], argv: Sequence[str] | None = None
               ) -> dict[str, Any]:
    """{"tool", "version", "command", "inputs": [{"path", "bytes", "sha256"}], ...}: every
    file of `inputs` (directories walked in sorted order), hashed up to MAX_FILES files and
    MAX_BYTES bytes (past them `unhashed_files` counts the rest). `command` is None when
    no CLI command is running (a library call)."""
    from xmemplan import __version__

    args = list(ARGV if argv is None else argv)
    files: list[dict[str, Any]] = []
    unhashed = 0
    total = 0.0
    for p in inputs:
        for f in _files(Path(p)):
            size = f.stat().st_size
            if len(files) >= MAX_FILES or total + size > MAX_BYTES:
                unhashed += 1
                continue
            total += size
            files.append({"path": str(f), "bytes": size, "sha256": sha256(f)})
    out: dict[str, Any] = {"tool": "xmemplan", "version": __version__,
                           "command": shlex.join(["xmemplan", *args]) if args else None,
                           "inputs": files}
    if unhashed:
        out["unhashed_files"] = unhashed
    return out

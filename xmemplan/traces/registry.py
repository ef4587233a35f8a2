"""Format names, content sniffing and directory walking.

Readers are imported lazily by name, so listing formats costs nothing. Sniffing order
matters: the most specific format goes first.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from xmemplan.errors import InputError, UsageError

# --format name -> module. Add a reader by adding a line here.
READERS: dict[str, str] = {
    # first: its sniff is a cheap byte search, and the weka/AgentX keys are unmistakable
    "claude-blocks": "xmemplan.traces.claude_blocks",
    "netpreme": "xmemplan.traces.netpreme",  # before claude-transcript: claims run-folder copies
    "claude-transcript": "xmemplan.traces.claude_transcript",
    "request-log": "xmemplan.traces.request_log",
    "bailian": "xmemplan.traces.bailian",
    "mooncake": "xmemplan.traces.mooncake",
    "tokens": "xmemplan.traces.tokens",
}

SNIFF_BYTES = 64 * 1024


def get_reader(name: str) -> ModuleType:
    if name not in READERS:
        raise UsageError(
            f"unknown trace format '{name}'", f"choose one of: {', '.join(sorted(READERS))}"
        )
    return importlib.import_module(READERS[name])


def sniff(path: Path) -> ModuleType | None:
    """The reader whose format the first bytes of `path` look like, or None."""
    with path.open("rb") as f:
        head = f.read(SNIFF_BYTES)
    if not head.strip():
        return None
    for name in READERS:
        reader = get_reader(name)
        if reader.sniff(path, head):
            return reader
    return None


@dataclass
class Discovery:
    """Which reader takes which file, and the files no reader takes (reported, not hidden)."""

    files: list[tuple[Path, ModuleType]] = field(default_factory=list)
    unrecognized: list[Path] = field(default_factory=list)
    empty: list[Path] = field(default_factory=list)

    def by_format(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for _, reader in self.files:
            counts[reader.NAME] = counts.get(reader.NAME, 0) + 1
        return counts


def _walk(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    if path.is_dir():
        return sorted(
            p for p in path.rglob("*")
            if p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts)
        )
    raise InputError("no such file or directory", path=path, hint="check the path")


def discover(paths: list[Path], format_name: str | None = None) -> Discovery:
    """Walk `paths` (recursively for directories) and assign each file a reader."""
    if not paths:
        raise UsageError("no trace files given", "pass one or more files or directories")
    forced = get_reader(format_name) if format_name else None
    found = Discovery()
    for root in paths:
        files = _walk(root)
        if not files:
            raise InputError(
                "directory holds no files", path=root, hint="point at a folder of traces"
            )
        for f in files:
            if f.stat().st_size == 0:
                found.empty.append(f)
                continue
            reader = forced if forced is not None else sniff(f)
            if reader is None:
                found.unrecognized.append(f)
            else:
                found.files.append((f, reader))
    return found

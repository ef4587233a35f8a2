"""Format names, content sniffing and the one input resolver for trace paths.

Readers are imported lazily by name, so listing formats costs nothing. Sniffing order
matters: the most specific format goes first, and every sniffer sees the whole first record
of the file (`base.head_bytes`), however long it is.

`discover` turns the paths the user gave into the list of files to read, once each:
- a named path that is not a regular file or folder (a FIFO, `-`, a process substitution
  `<(...)`, a device), a broken link or an unreadable file is an InputError naming it;
- inside a folder, such entries, unreadable subfolders and compressed files that a reader
  cannot take are skipped and counted (reported with the line skips; `--strict` fails);
- symbolic links are followed, loops cut; a file named twice, or reached twice through a
  folder or a link, is read once, with a note;
- gzip, xz and bzip2 files (and zstd with the `zstandard` package) are read decompressed.
"""

from __future__ import annotations

import importlib
import os
import signal
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType, ModuleType

from xmemplan.errors import InputError, UsageError
from xmemplan.traces.base import SNIFF_BYTES, SkipLog, compression, head_bytes

__all__ = ["READERS", "SNIFF_BYTES", "Discovery", "discover", "get_reader", "sniff"]

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


def _forking_a_worker() -> bool:
    """True inside a fork that multiprocessing makes (a pool worker), not a subprocess."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename.endswith(("popen_fork.py", "popen_forkserver.py")):
            return True
        frame = frame.f_back
    return False


_blocked = [False]


def _before_fork() -> None:
    if _forking_a_worker():
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        _blocked[0] = True


def _after_fork_parent() -> None:
    if _blocked[0]:
        _blocked[0] = False
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # a pending Ctrl-C lands


def _after_fork_child() -> None:
    if _blocked[0]:
        _blocked[0] = False
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


# Ctrl-C in a terminal sends SIGINT to the whole process group. A pool worker that gets it
# prints a KeyboardInterrupt traceback (wherever it is: starting, waiting for a job, reading
# one), and the broken pool makes the executor's thread print another. So a worker ignores
# SIGINT from its first instruction: the signal is blocked around the fork and set to
# ignored in the child before it is unblocked. Only the parent stops; xmemplan.cli.main then
# ends the workers and exits 130. Forks that are not multiprocessing's (subprocess) are left
# alone, so programs run from here keep the default.
os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_parent,
                    after_in_child=_after_fork_child)


def _quiet_interrupt_in_workers() -> None:
    """The same for a worker forked before this module was imported."""
    import multiprocessing

    if (multiprocessing.parent_process() is not None
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler):
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def get_reader(name: str) -> ModuleType:
    if name not in READERS:
        raise UsageError(
            f"unknown trace format '{name}'", f"choose one of: {', '.join(sorted(READERS))}"
        )
    _quiet_interrupt_in_workers()
    return importlib.import_module(READERS[name])


def sniff(path: Path) -> ModuleType | None:
    """The reader whose format the first record of `path` looks like, or None."""
    head = head_bytes(path)
    if not head.strip():
        return None
    for name in READERS:
        reader = get_reader(name)
        try:
            if reader.sniff(path, head):
                return reader
        except InputError:
            raise
        except Exception:  # a first record of odd types (a list for a string): not this format
            continue
    return None


@dataclass
class Discovery:
    """Which reader takes which file, and the files no reader takes (reported, not hidden).

    `skips` counts entries of folders that could not be read (one skip per path, no line);
    `notes` says what was read differently from how it was named (duplicates, hidden files,
    __pycache__ folders).
    """

    files: list[tuple[Path, ModuleType]] = field(default_factory=list)
    unrecognized: list[Path] = field(default_factory=list)
    empty: list[Path] = field(default_factory=list)
    skips: SkipLog = field(default_factory=SkipLog)
    notes: list[str] = field(default_factory=list)
    duplicates: list[Path] = field(default_factory=list)
    linked_dirs: list[Path] = field(default_factory=list)
    hidden: int = 0
    caches: int = 0  # __pycache__ folders met inside a folder (not read)

    def by_format(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for _, reader in self.files:
            counts[reader.NAME] = counts.get(reader.NAME, 0) + 1
        return counts


_KINDS = (
    (stat.S_ISFIFO, "a FIFO or pipe (process substitution <(...) makes one)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def _kind(mode: int) -> str:
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"


def _named(path: Path) -> os.stat_result:
    """Check one path the user named; its stat (links followed), or InputError/UsageError."""
    if str(path) == "-":
        try:
            os.stat(path)
        except OSError:
            raise UsageError(
                "'-' (standard input) cannot be read as a trace",
                "save the trace to a file and pass its path (traces are read more than once)",
            ) from None
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            raise InputError(
                f"broken symbolic link (to {os.readlink(path)})", path=path,
                hint="point it at an existing file",
            ) from None
        raise InputError("no such file or directory", path=path, hint="check the path") from None
    except PermissionError:
        raise InputError("permission denied", path=path) from None
    except OSError as exc:
        raise InputError(f"cannot read it ({exc.strerror or exc})", path=path) from None
    if stat.S_ISDIR(st.st_mode):
        if not os.access(path, os.R_OK | os.X_OK):
            raise InputError("folder is not readable (permission denied)", path=path)
        return st
    if not stat.S_ISREG(st.st_mode):
        raise InputError(
            f"not a regular file: {_kind(st.st_mode)}", path=path,
            hint="save it to a file first: traces are read more than once, a pipe only once",
        )
    if not os.access(path, os.R_OK):
        raise InputError("permission denied", path=path)
    return st


# Folders that hold no trace by construction: Python's bytecode cache (a folder of traces
# next to a script, or a test's fixtures, gets one as soon as the script is imported). Its
# .pyc files would each be a "file in no known format", and fail a --strict run.
NOT_TRACE_DIRS = ("__pycache__",)


def _walk(root: Path, found: Discovery) -> list[tuple[Path, os.stat_result]]:
    """Regular files under `root` (links followed, loops cut), sorted by path; anything else
    met on the way is a counted skip. Names starting with '.' and `NOT_TRACE_DIRS` folders
    are not read (counted, in a note)."""
    out: list[tuple[Path, os.stat_result]] = []
    seen_dirs: set[tuple[int, int]] = set()

    def on_error(exc: OSError) -> None:
        found.skips.skip(exc.filename or root, None,
                         f"folder not readable ({exc.strerror or exc}): skipped",
                         whole_file=True)

    for dirpath, dirnames, filenames in os.walk(root, onerror=on_error, followlinks=True):
        here = Path(dirpath)
        try:
            dst = os.stat(dirpath)
        except OSError:
            continue
        key = (dst.st_dev, dst.st_ino)
        if key in seen_dirs:  # a link back to a folder already walked: a loop or a repeat
            dirnames[:] = []
            found.linked_dirs.append(here)
            continue
        seen_dirs.add(key)
        hidden = [d for d in dirnames if d.startswith(".")]
        caches = [d for d in dirnames if d in NOT_TRACE_DIRS]
        found.hidden += len(hidden)
        found.caches += len(caches)
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".")
                             and d not in NOT_TRACE_DIRS)
        for name in filenames:
            if name.startswith("."):
                found.hidden += 1
                continue
            p = here / name
            try:
                st = os.stat(p)
            except FileNotFoundError:
                found.skips.skip(p, None, "broken symbolic link: skipped", whole_file=True)
                continue
            except OSError as exc:
                found.skips.skip(p, None, f"cannot read it ({exc.strerror or exc}): skipped",
                                 whole_file=True)
                continue
            if stat.S_ISDIR(st.st_mode):  # a link to a folder that os.walk listed as a file
                continue
            if not stat.S_ISREG(st.st_mode):
                found.skips.skip(p, None, f"not a regular file ({_kind(st.st_mode)}): skipped",
                                 whole_file=True)
                continue
            if not os.access(p, os.R_OK):
                found.skips.skip(p, None, "permission denied: skipped", whole_file=True)
                continue
            out.append((p, st))
    out.sort(key=lambda item: item[0])
    return out


def discover(
    paths: list[Path], format_name: str | None = None, *, strict: bool = False
) -> Discovery:
    """Walk `paths` (recursively for directories) and assign each file a reader, once each."""
    if not paths:
        raise UsageError("no trace files given", "pass one or more files or directories")
    forced = get_reader(format_name) if format_name else None
    found = Discovery(skips=SkipLog(strict=strict))
    seen: dict[tuple[int, int], Path] = {}
    for root in paths:
        root = Path(root)
        st = _named(root)
        if stat.S_ISDIR(st.st_mode):
            files = _walk(root, found)
            if not files and not found.skips.total:
                raise InputError(
                    "directory holds no files", path=root, hint="point at a folder of traces"
                )
        else:
            files = [(root, st)]
        for f, fst in files:
            key = (fst.st_dev, fst.st_ino)
            if key in seen:
                found.duplicates.append(f)
                continue
            seen[key] = f
            named = f == root
            if fst.st_size == 0:
                found.empty.append(f)
                continue
            try:
                reader = _assign(f, forced)
            except InputError as exc:
                if named or strict:
                    raise
                found.skips.skip(f, None, f"{exc.message.split(': ', 1)[-1]}: skipped",
                                 whole_file=True)
                continue
            if reader is None:
                found.unrecognized.append(f)
            else:
                found.files.append((f, reader))
    if found.duplicates:
        shown = ", ".join(str(p) for p in found.duplicates[:3])
        more = f" and {len(found.duplicates) - 3} more" if len(found.duplicates) > 3 else ""
        found.notes.append(
            f"{len(found.duplicates)} files were named more than once (directly, or through a "
            f"folder or a link) and read once: {shown}{more}")
    if found.linked_dirs:
        found.notes.append(
            f"{len(found.linked_dirs)} folders were reached a second time (a link loop or a "
            f"second way in) and read once: {', '.join(str(p) for p in found.linked_dirs[:3])}")
    if found.hidden:
        found.notes.append(
            f"{found.hidden} hidden files or folders (names starting with '.') were not read")
    if found.caches:
        found.notes.append(
            f"{found.caches} __pycache__ folder{'s' if found.caches > 1 else ''} (Python's "
            f"bytecode cache) {'were' if found.caches > 1 else 'was'} not read")
    return found


def _assign(path: Path, forced: ModuleType | None) -> ModuleType | None:
    """The reader for one file (sniffed unless forced); InputError if it cannot take it."""
    kind = compression(path)
    if kind == "zip":
        raise InputError(
            "a zip archive (several files in one)", path=path,
            hint=f"unpack it first (unzip {path}) and pass the folder",
        )
    reader = forced if forced is not None else sniff(path)
    if reader is not None and kind is not None and not getattr(reader, "READS_COMPRESSED", False):
        raise InputError(
            f"compressed ({kind}); the {reader.NAME} reader reads plain files only", path=path,
            hint="decompress it first (for example: gunzip -k, unxz -k, zstd -d)",
        )
    return reader

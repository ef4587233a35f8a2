"""JSON in and out, and the one safe writer for every output file.

`to_json` writes NaN and infinities as null (JSON has none) and numpy scalars and arrays as
plain numbers and lists. `read_json` names the file when it cannot be read. `open_output`
and `write_output` are the one writer of every output file (see the section below).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import secrets
import signal
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, cast

from xmemplan.errors import InputError, UsageError


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "item"):  # numpy scalars
        return obj.item()
    if hasattr(obj, "tolist"):
        return obj.tolist()
    raise TypeError(f"not JSON serializable: {type(obj).__name__}")


def clean(obj: Any) -> Any:
    """`obj` with non-finite floats as None, recursively (JSON has no NaN)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [clean(v) for v in obj]
    return obj


def to_json(obj: Any) -> str:
    """Indented JSON; NaN and infinities as null (never the non-JSON `NaN`/`Infinity`)."""
    return json.dumps(clean(obj), indent=2, default=_json_default, allow_nan=False)


def json_line(obj: Any) -> bytes:
    """One compact JSON line (JSONL), NaN and infinities as null."""
    try:
        text = json.dumps(obj, separators=(",", ":"), default=_json_default, allow_nan=False)
    except ValueError:  # a non-finite float somewhere: the slow, cleaning path
        text = json.dumps(clean(obj), separators=(",", ":"), default=_json_default,
                          allow_nan=False)
    return text.encode("utf-8") + b"\n"


def read_text(path: Path | str, what: str = "file", hint: str | None = None) -> str:
    """The UTF-8 text of a small input file (a profile, plan, catalog, measurements).

    Stat first: opening a FIFO or a process substitution with no writer blocks for ever.
    Every failure is an InputError naming the file; a UTF-8 BOM is dropped.
    """
    p = Path(path)
    if p.exists() and not p.is_file():
        raise InputError("not a regular file", path=path, hint=hint or f"pass a {what}")
    try:
        return p.read_text(encoding="utf-8-sig")
    except FileNotFoundError as exc:
        raise InputError(f"no such {what}", path=path) from exc
    except UnicodeDecodeError as exc:
        raise InputError(
            "not UTF-8 text (compressed? decompress it first)", path=path
        ) from exc
    except OSError as exc:
        raise InputError(f"cannot read it ({exc.strerror or exc})", path=path) from exc


# Bounds of every document read (profiles, plans, measurements, AIPerf artifacts, catalog
# and device TOML): the nesting a document may have, the digits an integer may have (JSON
# integers become Python ints: 10^4300 would stop int() and 10^400 overflow a float), and
# the range an integer may take (int64, what the arrays downstream hold).
MAX_DOC_DEPTH = 64
MAX_INT = 2**63 - 1


class _BigNumber:
    """A number literal out of range, kept as text until the walk names its JSON path."""

    def __init__(self, text: str) -> None:
        self.text = text


def _parse_int(text: str) -> Any:
    if len(text.lstrip("-")) > 19:  # checked before int() converts it
        return _BigNumber(text)
    v = int(text)
    return v if -MAX_INT - 1 <= v <= MAX_INT else _BigNumber(text)


def json_path(parts: Iterable[Any]) -> str:
    """`$.a.b[3]` for the keys and indexes `parts`."""
    out = "$"
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else f".{p}"
    return out


def check_tree(doc: Any, path: Path | str, max_depth: int = MAX_DOC_DEPTH,
               line_of: Any = None) -> None:
    """InputError naming the file and the JSON path of the first value out of bounds:
    nesting deeper than `max_depth`, an integer outside int64 (non-finite floats are left to
    each field's range check, which names the allowed range). Iterative (no recursion);
    `line_of(parts)` may give a line for the message."""
    stack: list[tuple[Any, tuple[Any, ...]]] = [(doc, ())]
    while stack:
        cur, parts = stack.pop()
        if len(parts) > max_depth:
            raise InputError(f"nested deeper than {max_depth} levels", path=path,
                             line=line_of(parts) if line_of else None,
                             field=json_path(parts[:max_depth]))
        if isinstance(cur, dict):
            stack.extend((v, (*parts, k)) for k, v in cur.items())
        elif isinstance(cur, list):
            stack.extend((v, (*parts, i)) for i, v in enumerate(cur))
        elif isinstance(cur, _BigNumber) or (isinstance(cur, int) and not isinstance(cur, bool)
                                             and not -MAX_INT - 1 <= cur <= MAX_INT):
            text = cur.text if isinstance(cur, _BigNumber) else str(cur)
            shown = text if len(text) <= 24 else f"{text[:12]}... ({len(text)} digits)"
            raise InputError(
                f"integer {shown} is out of range (64-bit: at most {MAX_INT:,})",
                path=path, line=line_of(parts) if line_of else None,
                field=json_path(parts))


def parse_json(text: str, path: Path | str) -> Any:
    """A JSON document from its text, bounded (see MAX_DOC_DEPTH, MAX_INT); InputError
    naming the file, the line or the JSON path."""
    try:
        doc = json.loads(text, parse_int=_parse_int)
    except json.JSONDecodeError as exc:
        raise InputError(f"not a JSON document ({exc.msg})", path=path, line=exc.lineno) from exc
    except RecursionError as exc:
        raise InputError(f"nested deeper than {MAX_DOC_DEPTH} levels", path=path) from exc
    check_tree(doc, path)
    return doc


def read_json(path: Path | str) -> Any:
    """A JSON document from `path`, bounded; InputError naming the file, line or JSON path."""
    return parse_json(read_text(path, "JSON file"), path)


def parse_toml(text: str, path: Path | str) -> dict[str, Any]:
    """A TOML document, bounded as JSON ones are; InputError naming the file and line."""
    import re
    import tomllib

    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"line (\d+)", str(exc))
        raise InputError(f"not valid TOML ({exc})", path=path,
                         line=int(m.group(1)) if m else None) from exc
    except (ValueError, RecursionError) as exc:  # 10^4300 digits; arrays nested 1,000 deep
        why = ("an integer with more than 4,300 digits" if isinstance(exc, ValueError)
               else f"nested deeper than {MAX_DOC_DEPTH} levels")
        raise InputError(f"not readable TOML: {why}", path=path) from None

    def line_of(parts: tuple[Any, ...]) -> int | None:
        key = next((p for p in reversed(parts) if isinstance(p, str)), None)
        if key is None:
            return None
        for n, ln in enumerate(text.splitlines(), 1):
            if ln.lstrip().startswith((f"{key} ", f"{key}=", f'"{key}"')):
                return n
        return None

    check_tree(doc, path, line_of=line_of)
    return doc


# ---------------------------------------------------------------------------------------
# The one writer. Every file a command writes goes through `open_output` (or its one-shot
# form `write_output`), after `check_output` has vetted the path at the border:
# - the data goes to a temporary file with a unique name (`.NAME.XXXXXXXX.tmp`, hidden, so
#   no discovery reads it) in the target's own folder, is flushed to disk, then renamed over
#   the target: a reader sees the old file or the new one, never a part;
# - the temporary file is removed on any exit: an exception, Ctrl-C (SIGINT) or SIGTERM
#   (`cleanup_on_signals`, installed by the CLI, removes the live ones before the
#   interpreter unwinds);
# - a new file's mode follows the umask (0666 & ~umask), an existing file keeps its mode;
# - a target that exists but is not a regular file (a FIFO, a device, a socket, a folder)
#   is refused, '-' aside (standard output); a symbolic link is written through (the link
#   stays, its target is replaced);
# - an output that is one of the inputs, or lies inside an input folder (discovery reads
#   every file there by content, so the next run would read it as a trace), is refused.
# ---------------------------------------------------------------------------------------

STDOUT = "-"
_LIVE: dict[str, int] = {}  # temporary files being written -> the pid that owns them
_TERMINATED = [False]
_SIGNALLED = [False]  # a SIGINT or SIGTERM reached this run's handler


def _cannot(flag: str, path: Path | str, why: str, hint: str | None = None) -> UsageError:
    return UsageError(f"cannot write {flag} '{path}': {why}",
                      hint or f"pass {flag} another path")


def _kind_of(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO or pipe"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a regular file"


def check_output(path: Path | str, flag: str, inputs: Iterable[Path | str] = ()) -> Path:
    """Fail before a run (UsageError, exit 2) when `path` cannot take an output.

    `inputs`: every file and folder the run reads. Refused: a target that exists and is not
    a regular file ('-' means standard output and is allowed), a missing or unwritable
    folder, a target that is one of the input files, or a target inside an input folder
    (the next run would read it). Returns the path to write (links resolved).
    """
    if str(path) == STDOUT:
        return Path(STDOUT)
    p = Path(path)
    real = Path(os.path.realpath(p))
    try:
        st: os.stat_result | None = os.stat(real)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise _cannot(flag, path, exc.strerror or str(exc)) from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise _cannot(flag, path, f"it is {_kind_of(st.st_mode)}, not a regular file",
                      f"pass {flag} a file path" + ("" if stat.S_ISDIR(st.st_mode)
                                                   else " (a new or a regular file)"))
    parent = real.parent
    if not parent.is_dir():
        raise _cannot(flag, path, "its folder does not exist",
                      f"create the folder first, or pass {flag} another path")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise _cannot(flag, path, "its folder is not writable",
                      f"pass {flag} a path in a writable folder")
    check_not_input(path, flag, inputs)
    return real


def check_not_input(path: Path | str, flag: str, inputs: Iterable[Path | str]) -> None:
    """UsageError when `path` (a file or an output folder, existing or not) is one of the
    input files, or lies inside an input folder: discovery reads every file of a folder by
    its content, so the next run would read the output as an input."""
    real = Path(os.path.realpath(path))
    try:
        st: os.stat_result | None = os.stat(real)
    except OSError:
        st = None
    for item in inputs:
        q = Path(item)
        if str(q) == STDOUT:
            continue
        try:
            qst = os.stat(q)
        except OSError:
            continue
        if st is not None and stat.S_ISREG(qst.st_mode) and \
                (qst.st_dev, qst.st_ino) == (st.st_dev, st.st_ino):
            raise UsageError(f"{flag} '{path}' is one of the inputs ({q}); refusing to "
                             "overwrite it", f"pass {flag} another path")
        if stat.S_ISDIR(qst.st_mode):
            qreal = Path(os.path.realpath(q))
            if qreal == real or qreal in real.parents:
                raise UsageError(
                    f"{flag} '{path}' is inside the input folder '{q}': the next run would "
                    "read it as an input", f"pass {flag} a path outside '{q}'")


def _on_signal(signum: int, frame: Any) -> None:
    """SIGINT/SIGTERM: remove this process's live temporary files, then unwind; inside
    llvmlite's bindings, a moment later (`_in_llvm_handoff`)."""
    if _LIVE_OWNER[0] != os.getpid():  # a forked worker: not ours to clean, default action
        if signum == signal.SIGINT:
            return  # workers leave Ctrl-C to the parent (traces/registry.py)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    remove_temporaries()
    _SIGNALLED[0] = True
    if signum == signal.SIGTERM:
        _TERMINATED[0] = True
    if _in_llvm_handoff(frame) and _deferred[0] < DEFER_MAX:
        _deferred[0] += 1
        _redeliver(signum)
        return
    _deferred[0] = 0
    raise KeyboardInterrupt


# The interrupt is an exception raised wherever the interpreter is, and llvmlite's bindings
# are not safe against one: `link_modules` calls LLVMPY_LinkModules, which destroys the
# source module, and only then detaches its Python wrapper; raised between the two, the
# interrupt leaves a wrapper that disposes of the freed module when it is collected: SIGSEGV
# or glibc's abort on the double free (the kill test's -11 and -6: numba links its runtime
# and the cached kernels there, in the first 0.1-0.2 s of a command; tests/fuzz/test_kill.py,
# docs/reliability.md). So while a frame of llvmlite.binding is on the stack the handler
# only cleans up, and the signal is sent again DEFER_S later, until the bindings have
# returned (a few ms: their Python code is glue around C calls; a compile spends its minutes
# in numba's own passes, where the interrupt is safe). At most DEFER_MAX times.
DEFER_S = 0.005
DEFER_MAX = 400  # 2 s: past it the interrupt goes in anyway
_deferred = [0]
_LLVM_BINDING = os.sep + os.path.join("llvmlite", "binding") + os.sep


def _in_llvm_handoff(frame: Any, depth: int = 64) -> bool:
    """Whether llvmlite.binding code is on the stack of `frame` (within `depth` frames)."""
    while frame is not None and depth > 0:
        if _LLVM_BINDING in frame.f_code.co_filename:
            return True
        frame, depth = frame.f_back, depth - 1
    return False


def _redeliver(signum: int) -> None:
    import threading

    t = threading.Timer(DEFER_S, os.kill, (os.getpid(), signum))
    t.daemon = True
    t.start()


_LIVE_OWNER = [0]


def remove_temporaries() -> None:
    """Remove every temporary output file this process has open (no-op when none)."""
    me = os.getpid()
    for tmp, owner in list(_LIVE.items()):
        if owner == me:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            _LIVE.pop(tmp, None)


def terminated() -> bool:
    """Whether the run was stopped by SIGTERM (exit 143) rather than Ctrl-C (130)."""
    return _TERMINATED[0]


def signalled() -> bool:
    """Whether a SIGINT or SIGTERM reached the handler during this run."""
    return _SIGNALLED[0]


@contextlib.contextmanager
def cleanup_on_signals() -> Iterator[None]:
    """While active (main thread only), SIGINT and SIGTERM remove the temporary outputs and
    raise KeyboardInterrupt (so `finally` blocks run); the previous handlers come back
    after."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _LIVE_OWNER[0] = os.getpid()
    _TERMINATED[0] = False
    _SIGNALLED[0] = False
    _deferred[0] = 0
    old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for s in old:
        signal.signal(s, _on_signal)
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h if h is not None else signal.SIG_DFL)
        remove_temporaries()


@contextlib.contextmanager
def open_output(path: Path | str, flag: str,
                inputs: Iterable[Path | str] = ()) -> Iterator[BinaryIO]:
    """A binary file to write the output `path` into; it replaces `path` whole on success.

    `path` is checked (`check_output`) first. '-' writes to standard output directly. On
    any exception or signal the temporary file is removed and `path` is left as it was; an
    OSError (disk full, permissions) becomes a UsageError naming the flag and the path.
    """
    if str(path) == STDOUT:
        yield _stdout_binary()
        return
    real = check_output(path, flag, inputs)
    try:
        old_mode: int | None = stat.S_IMODE(os.stat(real).st_mode)
    except OSError:
        old_mode = None
    tmp = ""
    fd = -1
    try:
        for _ in range(100):
            tmp = str(real.parent / f".{real.name}.{secrets.token_hex(4)}.tmp")
            _LIVE[tmp] = os.getpid()  # registered before it exists: a signal removes it
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
                break
            except FileExistsError:
                _LIVE.pop(tmp, None)
        if fd < 0:
            raise _cannot(flag, path, "no free temporary name in its folder")
        if old_mode is not None:
            os.fchmod(fd, old_mode)
        with os.fdopen(fd, "wb") as fh:
            fd = -1
            try:
                yield fh
            except OSError as exc:  # the caller's own error (reading an input): as it is
                raise _Passed(exc) from exc
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, real)
        _LIVE.pop(tmp, None)
    except _Passed as wrapped:
        raise wrapped.exc from None
    except OSError as exc:
        raise _cannot(flag, path, exc.strerror or str(exc),
                      f"free space or pass {flag} a path in a writable folder") from exc
    finally:
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)
        if tmp and tmp in _LIVE:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            _LIVE.pop(tmp, None)


class _Passed(Exception):
    def __init__(self, exc: OSError) -> None:
        self.exc = exc


def _stdout_binary() -> BinaryIO:
    import sys

    buf = getattr(sys.stdout, "buffer", None)
    if buf is None:  # a text-only stream (captured in tests)
        return cast(BinaryIO, _TextAsBinary(sys.stdout))
    sys.stdout.flush()
    return cast(BinaryIO, buf)


class _TextAsBinary:
    def __init__(self, stream: Any) -> None:
        self._s = stream

    def write(self, data: bytes) -> int:
        self._s.write(data.decode("utf-8", "replace"))
        return len(data)

    def flush(self) -> None:
        self._s.flush()


def write_output(path: Path | str, data: str | bytes, flag: str,
                 inputs: Iterable[Path | str] = ()) -> None:
    """Write `data` to the output `path` whole (see `open_output`)."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    with open_output(path, flag, inputs) as fh:
        fh.write(raw)

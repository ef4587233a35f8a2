"""JSON in and out, and the one safe writer for every output file.

`to_json` writes NaN and infinities as null (JSON has none) and numpy scalars and arrays as
plain numbers and lists. `read_json` names the file when it cannot be read. `write_output`
writes through a temporary file in the same folder and renames it into place, so an
interrupted run leaves the old file whole, and it refuses to write over a file the run reads.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

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
    return json.dumps(clean(obj), indent=2, default=_json_default)


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


def read_json(path: Path) -> Any:
    """A JSON document from `path`; InputError naming the file if it cannot be read."""
    text = read_text(path, "JSON file")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"not a JSON document ({exc.msg})", path=path, line=exc.lineno) from exc


def check_output(path: Path, flag: str, inputs: Iterable[Path] = ()) -> Path:
    """Fail before a run when `path` cannot be written or would overwrite an input.

    Called at the border, before any long work: the folder must exist and be writable, the
    path must not be a folder, and it must not be (or link to) any file the run reads.
    """
    p = Path(path)
    parent = p.resolve().parent
    if p.is_dir():
        raise UsageError(f"{flag} '{path}' is a folder", f"pass {flag} a file path")
    if not parent.is_dir():
        raise UsageError(
            f"cannot write {flag} '{path}': its folder does not exist",
            f"create the folder first, or pass {flag} another path",
        )
    if not os.access(parent, os.W_OK):
        raise UsageError(f"cannot write {flag} '{path}': its folder is not writable",
                         f"pass {flag} a path in a writable folder")
    target = p.resolve()
    if target.exists():
        for item in inputs:
            q = Path(item)
            same = q.is_file() and os.path.samefile(q, target)
            inside = q.is_dir() and q.resolve() in target.parents and _is_trace_like(target)
            if same or inside:
                raise UsageError(
                    f"{flag} '{path}' is one of the inputs; refusing to overwrite it",
                    f"pass {flag} another path",
                )
    return p


def _is_trace_like(path: Path) -> bool:
    # A file inside an input folder is an input when it is one a reader would open.
    return path.suffix.lower() in {".jsonl", ".json", ".parquet", ".csv", ".gz", ".xz", ".zst"}


def write_output(path: Path, text: str | bytes, flag: str) -> None:
    """Write `text` to `path` atomically: a temporary file in the same folder, then rename."""
    p = Path(path)
    data = text.encode("utf-8") if isinstance(text, str) else text
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.resolve().parent)
    except OSError as exc:
        raise UsageError(f"cannot write {flag} '{path}' ({exc.strerror or exc})",
                         f"pass {flag} a path in a writable folder") from exc
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, p)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise UsageError(f"cannot write {flag} '{path}' ({exc.strerror or exc})",
                             f"pass {flag} a path in a writable folder") from exc
        raise

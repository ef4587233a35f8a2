"""What every reader shares: options, the skip log, and JSON line helpers.

A reader is a module with:
- `NAME` (the `--trace-format` name), `HAS_SESSIONS` (False for formats such as
  Mooncake that carry no conversation id; `--scope auto` then means global),
- `sniff(path, head) -> bool`: True if the first bytes of the file are this format,
- `read(path, options, skips) -> Iterator[RequestBatch]`.

Readers never skip silently: every dropped line goes through `SkipLog.skip`, which counts it
by reason, keeps the first examples for the report, and raises instead under `--strict`. A
line that is kept but read with a caveat (an unreadable timestamp placed in file order) goes
through `SkipLog.warn`, counted apart.

Files are read through `read_input` (whole file, gzip/xz/bzip2 and, with the `zstandard`
package, zstd decompressed transparently, a UTF-8 byte-order mark dropped) and sniffed on
`head_bytes` (at least 64 KiB and always the whole first record, whatever its size). A reader
that reads through them sets `READS_COMPRESSED = True`; the registry refuses compressed files
for the others with a clear message.
"""

from __future__ import annotations

import bz2
import contextlib
import gzip
import io
import lzma
import math
import operator
import os
import re
import resource
import zlib
from collections import Counter
from collections.abc import Iterator, Sequence, Sized
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any, BinaryIO, cast

import numpy as np
import orjson

from xmemplan.errors import InputError, Skip
from xmemplan.units import MAX_PROMPT_TOKENS, count

__all__ = ["MAX_PROMPT_TOKENS"]  # re-exported: readers check prompt lengths against it

BOM = b"\xef\xbb\xbf"
SNIFF_BYTES = 64 * 1024
_CHUNK = 16 << 20

# Leading bytes of the compressed formats traces are shipped in (RFC 1952 gzip; xz file
# format 1.1.0 section 2.1.1.1; bzip2 "BZh" + block size; RFC 8878 zstd frame) and of archives
# that hold several files (zip local file header).
COMPRESSION_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x1f\x8b", "gzip"),
    (b"\xfd7zXZ\x00", "xz"),
    (b"BZh", "bzip2"),
    (b"\x28\xb5\x2f\xfd", "zstd"),
    (b"PK\x03\x04", "zip"),
)
_UNPACK = {"gzip": "gunzip -k", "xz": "unxz -k", "bzip2": "bunzip2 -k", "zstd": "zstd -d",
           "zip": "unzip"}


@dataclass
class ReadOptions:
    """Reader settings that come from the command line."""

    subagents: bool = False
    strict: bool = False
    tokenizer: str | None = None
    session_field: str | None = None
    timestamp_field: str | None = None
    hidden_prefix: str | None = None  # transcripts: auto, none or N tokens (traces/hidden_prefix)
    tokens: str | None = None  # transcripts: "calibrated" scales to the API's token counts


def compression(path: Path) -> str | None:
    """'gzip', 'xz', 'bzip2', 'zstd' or 'zip' when the file starts with that magic, else None."""
    with path.open("rb") as f:
        magic = f.read(6)
    for sig, name in COMPRESSION_MAGIC:
        if magic.startswith(sig):
            if name == "bzip2" and (len(magic) < 4 or magic[3:4] not in b"123456789"):
                continue
            return name
    return None


def memory_limit() -> int:
    """Bytes a decompressed file may take: half the machine's memory or of the process limit."""
    limits = []
    with contextlib.suppress(ValueError, OSError, AttributeError):
        limits.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY and soft > 0:
        limits.append(soft)
    return max(1 << 28, min(limits) // 2) if limits else 1 << 34


def _open_compressed(path: Path, kind: str) -> BinaryIO:
    if kind == "gzip":
        return cast(BinaryIO, gzip.open(path, "rb"))
    if kind == "xz":
        return cast(BinaryIO, io.BufferedReader(_XzStreams(path.open("rb"))))
    if kind == "bzip2":
        return cast(BinaryIO, bz2.open(path, "rb"))
    if kind == "zstd":
        try:
            import zstandard
        except ImportError:
            raise InputError(
                "compressed with zstd", path=path,
                hint=f"decompress it first ({_UNPACK[kind]} {path}), or pip install zstandard",
            ) from None
        return cast(BinaryIO, zstandard.ZstdDecompressor().stream_reader(path.open("rb")))
    raise InputError(
        f"a {kind} archive (several files in one)", path=path,
        hint=f"unpack it first ({_UNPACK[kind]} {path}) and pass the folder",
    )


class _XzStreams(io.RawIOBase):
    """An .xz file as one stream: concatenated streams and the stream padding between and
    after them (null bytes, a multiple of four: xz file format 1.2.0 section 2.2), which
    Python's lzma.open refuses as corrupt."""

    def __init__(self, raw: BinaryIO) -> None:
        self._raw = raw
        self._dec: Any = lzma.LZMADecompressor(lzma.FORMAT_XZ)
        self._pending = b""  # compressed bytes not yet given to a decompressor
        self._started = False  # the current decompressor has had input
        self._done = False
        self.chunk = _CHUNK

    def readable(self) -> bool:
        return True

    def readinto(self, buf: Any) -> int:
        view = memoryview(buf).cast("B")
        while not self._done:
            if self._dec.eof:
                rest = self._dec.unused_data + self._pending
                self._pending = b""
                stripped = rest.lstrip(b"\0")
                if not stripped:  # padding so far: need more input to tell
                    more = self._raw.read(self.chunk)
                    if not more:
                        if len(rest) % 4:
                            raise lzma.LZMAError("stream padding is not a multiple of 4 bytes")
                        self._done = True
                        break
                    self._dec = _SpentXz(rest + more)
                    continue
                if (len(rest) - len(stripped)) % 4:
                    raise lzma.LZMAError("stream padding is not a multiple of 4 bytes")
                self._dec = lzma.LZMADecompressor(lzma.FORMAT_XZ)
                self._pending = stripped
                self._started = False
            if self._dec.needs_input:
                data = self._pending or self._raw.read(self.chunk)
                self._pending = b""
                if not data:
                    if self._started or isinstance(self._dec, _SpentXz):
                        raise EOFError("compressed file ended before the end-of-stream marker")
                    self._done = True
                    break
                self._started = True
                out = self._dec.decompress(data, len(view))
            else:
                out = self._dec.decompress(b"", len(view))
            if out:
                view[:len(out)] = out
                return len(out)
        return 0

    def close(self) -> None:
        self._raw.close()
        super().close()


class _SpentXz:
    """A finished decompressor whose leftover input is all null bytes so far."""

    eof = True
    needs_input = False

    def __init__(self, unused: bytes) -> None:
        self.unused_data = unused

    def decompress(self, data: bytes, max_length: int = -1) -> bytes:
        return b""


def open_input(path: Path) -> BinaryIO:
    """A binary stream of the file's content, decompressed when it is compressed."""
    kind = compression(path)
    return path.open("rb") if kind is None else _open_compressed(path, kind)


def _corrupt(path: Path, exc: Exception) -> InputError:
    return InputError(
        f"compressed data is corrupt or cut short ({exc})", path=path,
        hint="check the download, or decompress it yourself to see where it breaks",
    )


_NONSPACE = re.compile(rb"[^ \t\r\n]")


def head_bytes(path: Path, minimum: int = SNIFF_BYTES) -> bytes:
    """The first bytes of `path` (decompressed, no BOM): at least `minimum` and always the whole
    first non-blank line, however long, so sniffers see one complete record.

    Bounded: a first line longer than a quarter of the memory a file may take
    (`memory_limit`) is an InputError, not a MemoryError."""
    limit = memory_limit() // 2
    try:
        with open_input(path) as f:
            buf = bytearray(f.read(minimum))
            while True:
                m = _NONSPACE.search(buf, 3 if buf.startswith(BOM) else 0)
                if m is not None and buf.find(b"\n", m.start()) >= 0:
                    break
                if len(buf) >= limit:
                    raise InputError(
                        f"first line is longer than {limit / 1e9:.3g} GB", path=path,
                        hint="a trace holds one record per line; is this a trace?")
                chunk = f.read(min(max(minimum, len(buf)), limit - len(buf)))
                if not chunk:
                    break
                buf += chunk
    except (EOFError, OSError, lzma.LZMAError, zlib.error, ValueError) as exc:
        if isinstance(exc, PermissionError):
            raise InputError("permission denied", path=path) from exc
        raise _corrupt(path, exc) from exc
    data = bytes(buf)
    del buf
    return data[3:] if data.startswith(BOM) else data


def read_input(path: Path) -> bytes:
    """The whole file as bytes: decompressed when compressed (bounded by `memory_limit`),
    without a UTF-8 byte-order mark. InputError naming the file on corrupt data."""
    kind = compression(path)
    if kind is None:
        data = path.read_bytes()
    else:
        limit = memory_limit()
        out = io.BytesIO()
        try:
            with _open_compressed(path, kind) as f:
                while True:
                    chunk = f.read(_CHUNK)
                    if not chunk:
                        break
                    out.write(chunk)
                    if out.tell() > limit:
                        raise InputError(
                            f"decompresses to more than {limit / 1e9:.3g} GB, half the "
                            "memory this process may use", path=path,
                            hint=f"decompress it yourself ({_UNPACK[kind]}) and split it",
                        )
        except (EOFError, OSError, lzma.LZMAError, zlib.error, ValueError) as exc:
            raise _corrupt(path, exc) from exc
        data = out.getvalue()
    return data[3:] if data.startswith(BOM) else data


class ChainedList(list):
    """A prompt's messages, as built by extending another prompt's: `key` names this list's
    prompt and `parent` the prompt it extends (None: none), whose messages are its first
    items, the same objects. Comparing two prompts then needs no walk over their shared
    messages (a session of N calls would cost N^2/2 identity checks)."""

    __slots__ = ("key", "parent")

    def __init__(self, items: Any = (), key: Any = None, parent: Any = None) -> None:
        super().__init__(items)
        self.key, self.parent = key, parent


def shared_objects(a: Sequence[Any], b: Sequence[Any], n: int) -> int:
    """How many of the first `n` items of `a` and `b`, from the start, are the same objects:
    `n` at once when one is a `ChainedList` extending the other, else checked (in C for the
    usual case, all of them)."""
    ka, kb = getattr(a, "key", None), getattr(b, "key", None)
    if ka is not None and kb is not None:
        if getattr(a, "parent", None) == kb and n <= len(b):
            return n
        if getattr(b, "parent", None) == ka and n <= len(a):
            return n
    if all(map(operator.is_, islice(a, n), islice(b, n))):
        return n
    k = 0
    while a[k] is b[k]:
        k += 1
    return k


@dataclass
class SkipLog:
    """Counts skipped input by reason; `strict` turns the first skip into an InputError.

    `warn` counts lines that are kept but read with a caveat (apart from the skips); under
    `strict` it raises too.
    """

    strict: bool = False
    counts: Counter[str] = field(default_factory=Counter)
    examples: list[Skip] = field(default_factory=list)
    max_examples: int = 20
    files: int = 0  # skips of a whole file (no line)
    warned: Counter[str] = field(default_factory=Counter)
    warn_examples: list[Skip] = field(default_factory=list)
    at: int | None = None  # the line being read (iter_json_lines), for a reader's failure

    def skip(
        self, path: str | Path, line: int | None, reason: str, field_name: str | None = None,
        *, whole_file: bool = False,
    ) -> None:
        """Count one skipped record (a line, or a request of a JSON document, which has no
        line number), or with `whole_file` a file left unread as a whole."""
        self._record(self.counts, self.examples, path, line, reason, field_name,
                     "drop --strict to skip and count such lines")
        if whole_file:
            self.files += 1

    def warn(
        self, path: str | Path, line: int | None, reason: str, field_name: str | None = None
    ) -> None:
        """A line kept but read with a caveat: counted apart from skips; `strict` raises."""
        self._record(self.warned, self.warn_examples, path, line, reason, field_name,
                     "drop --strict to read it with a counted warning")

    def _record(self, counts: Counter[str], examples: list[Skip], path: str | Path,
                line: int | None, reason: str, field_name: str | None, lenient: str) -> None:
        if self.strict:
            raise InputError(reason, path=path, line=line, field=field_name,
                             hint=f"fix the input, or {lenient}")
        key = reason if field_name is None else f"{reason} ({field_name})"
        counts[key] += 1
        if len(examples) < self.max_examples:
            examples.append(Skip(str(path), line, key))

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def lines(self) -> int:
        """Skipped records (lines, or requests of a JSON document), whole files apart."""
        return self.total - self.files

    @property
    def total_warned(self) -> int:
        return sum(self.warned.values())

    def merge(self, other: SkipLog) -> None:
        self.counts.update(other.counts)
        room = self.max_examples - len(self.examples)
        self.examples.extend(other.examples[: max(room, 0)])
        self.files += other.files
        self.warned.update(other.warned)
        room = self.max_examples - len(self.warn_examples)
        self.warn_examples.extend(other.warn_examples[: max(room, 0)])


class FileTime:
    """Timestamps of one file in file order: a missing or unreadable one is placed right after
    the request before it (its time carried forward), counted with a warning, so the replay
    keeps file order instead of moving the request to the end (or before its own past)."""

    def __init__(self, path: Path, skips: SkipLog, unit: str, scale: float = 1.0) -> None:
        self.path = path
        self.skips = skips
        self.unit = unit
        self.scale = scale
        self.last: float | None = None
        self.any_valid = False
        self.pending: list[int] = []  # rows before the first readable time

    def __call__(self, value: Any, line: int | None, field_name: str = "timestamp"
                 ) -> float | None:
        """Seconds for this row (None only while no row so far had a readable time)."""
        if value is None:
            if self.any_valid:
                self.skips.warn(self.path, line, "missing timestamp: kept in file order",
                                field_name)
            return self.last
        ok = not isinstance(value, bool) and isinstance(value, int | float)
        if ok and isinstance(value, float) and not math.isfinite(value):
            ok = False
        if not ok:
            self.skips.warn(
                self.path, line, f"not a number of {self.unit}: kept in file order", field_name)
            return self.last
        t = float(value) * self.scale
        self.last = t
        self.any_valid = True
        return t

    def finish(self, times: list[float]) -> None:
        """Give rows before the first readable time (NaN at the head of `times`, in file
        order) that first time, so they stay first; each is counted with a warning."""
        if not self.any_valid:
            return  # no row has a time: file order throughout, nothing to say
        for i, t in enumerate(times):
            if t == t:  # the first readable time
                for j in range(i):
                    times[j] = t
                if i:
                    self.skips.warn(self.path, None, f"{i} requests before the first "
                                    "timestamp: kept first, in file order", "timestamp")
                return


def iter_json_lines(
    path: Path, data: bytes, skips: SkipLog
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (line number, object) for each non-blank line; bad lines are skipped and counted.

    A last line without a newline that does not parse is reported as a truncated file.
    """
    if data.startswith(BOM):
        data = data[3:]
    lines = data.split(b"\n")
    last = len(lines) - 1
    for i, raw in enumerate(lines):
        if not raw.strip():
            continue
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError:
                skips.skip(path, i + 1, "line is not UTF-8 text")
                continue
            if i == last:
                skips.skip(path, i + 1, "truncated last line (file cut short?)")
            else:
                skips.skip(path, i + 1, f"malformed JSON ({str(exc).split(':')[0]})")
            continue
        if not isinstance(obj, dict):
            skips.skip(path, i + 1, f"expected a JSON object, got {type(obj).__name__}")
            continue
        # Bounded depth: orjson parses 1,024 levels, but its dumps stops at 255 and the text
        # readers walk messages. The C-speed bracket count only lets deep candidates through.
        if raw.count(b"[") + raw.count(b"{") > MAX_DEPTH and too_deep(obj):
            skips.skip(path, i + 1, f"nested deeper than {MAX_DEPTH} levels")
            continue
        skips.at = i + 1
        yield i + 1, obj
    skips.at = None


MAX_DEPTH = 64  # JSON nesting a trace record may have (real ones: under 12)


def too_deep(obj: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether `obj` nests lists/dicts more than `limit` levels (iterative: no recursion)."""
    stack: list[tuple[Any, int]] = [(obj, 1)]
    while stack:
        cur, depth = stack.pop()
        if depth > limit:
            return True
        kids = cur.values() if isinstance(cur, dict) else cur
        for v in kids:
            if isinstance(v, dict | list):
                stack.append((v, depth + 1))
    return False


def reader_failed(path: Path | str, exc: BaseException, skips: SkipLog) -> None:
    """A reader stopped on `path`: count the file as a whole-file skip naming the line and
    the cause (an InputError's message, or a record the reader could not take: a list where
    a string belongs, a number out of range), or raise under --strict. Errors that are not
    about the input (MemoryError, Ctrl-C) go on unchanged."""
    line = getattr(exc, "line", None) or skips.at
    skips.at = None
    if isinstance(exc, InputError) and skips.strict:
        raise exc  # --strict's own error (SkipLog), or one naming its field already
    if isinstance(exc, InputError):
        why = exc.message.split(": ", 1)[-1] if exc.path is not None else exc.message
    elif isinstance(exc, Exception) and not isinstance(exc, MemoryError):
        detail = str(exc).splitlines()[0][:120] if str(exc) else ""
        why = f"a record its reader cannot take ({type(exc).__name__}" + (
            f": {detail})" if detail else ")")
    else:
        raise exc
    if skips.strict:
        raise InputError(why, path=path, line=line,
                         hint="fix the input, or drop --strict to skip the file and count it"
                         ) from exc
    skips.skip(path, line, f"{why}: file skipped", whole_file=True)


_first_memo: list[Any] = [None, None]  # (head, parsed): every sniffer asks for the same head


def first_json_line(head: bytes) -> dict[str, Any] | None:
    """Parse the first non-blank line of `head` as a JSON object, or None."""
    if _first_memo[0] is head:
        return _first_memo[1]
    obj: Any = None
    body = head[3:] if head.startswith(BOM) else head
    start = len(body) - len(body.lstrip())
    end = body.find(b"\n", start)
    raw = body[start:] if end < 0 else body[start:end]
    if raw.strip():
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError:
            obj = None
    result = obj if isinstance(obj, dict) else None
    _first_memo[0], _first_memo[1] = head, result
    return result


def check_int(
    value: Any, path: Path, line: int | None, name: str, skips: SkipLog,
    *, lo: int = 0, hi: int = MAX_PROMPT_TOKENS,
) -> int | None:
    """Return `value` if it is an int in [lo, hi]; else skip the line and return None."""
    if isinstance(value, bool) or not isinstance(value, int):
        if value is None:
            skips.skip(path, line, "missing field", name)
        else:
            skips.skip(path, line, f"expected an integer, got {type(value).__name__}", name)
        return None
    if value < lo or value > hi:
        skips.skip(path, line, f"value {value} outside [{lo}, {hi:,}]", name)
        return None
    return value


def int_array(
    value: Any, path: Path, line: int | None, name: str, skips: SkipLog
) -> np.ndarray | None:
    """Return `value` (a JSON list of integers) as int64; else skip the line and return None.

    The type check is done by numpy on the whole list, not by a Python loop per element.
    """
    if value is None:
        skips.skip(path, line, "missing field", name)
        return None
    if not isinstance(value, list):
        skips.skip(path, line, f"expected a list of integers, got {type(value).__name__}", name)
        return None
    if not value:
        return np.empty(0, dtype=np.int64)
    try:
        arr = np.asarray(value)
    except (ValueError, OverflowError):
        arr = np.asarray([0.5])
    if arr.ndim != 1 or arr.dtype.kind not in "iu" or arr.dtype == np.uint64:
        skips.skip(path, line, "expected a list of 64-bit integers", name)
        return None
    return arr.astype(np.int64, copy=False)


def block_row(
    obj: dict[str, Any], path: Path, line: int, skips: SkipLog, block: int, ts_unit: str
) -> tuple[Any, int, int | None, np.ndarray] | None:
    """The fields Mooncake and Qwen-Bailian rows share, checked; None if the row is skipped.

    Returns (timestamp as written, unchecked: the caller's `FileTime` reads it, input_length,
    output_length, hash_ids); `hash_ids` must hold ceil(input_length / block) ids (the last
    block partial).
    """
    ts = obj.get("timestamp")
    n = check_int(obj.get("input_length"), path, line, "input_length", skips)
    if n is None:
        return None
    out = obj.get("output_length")
    if out is not None:
        out = check_int(out, path, line, "output_length", skips)
        if out is None:
            return None
    if "hash_ids" not in obj or obj["hash_ids"] is None:
        skips.skip(path, line, "missing field", "hash_ids")
        return None
    ids = int_array(obj["hash_ids"], path, line, "hash_ids", skips)
    if ids is None:
        return None
    expected = -(-n // block)
    if ids.shape[0] != expected:
        skips.skip(
            path, line,
            f"{ids.shape[0]} block ids for input_length {n} (expected ceil({n}/{block}) = "
            f"{expected}): one of the two is wrong",
            "hash_ids",
        )
        return None
    return ts, n, out, ids


def skip_summary(skips: SkipLog, unrecognized: Sized = (), empty: Sized = ()) -> str:
    """What was not read, counted: lines and whole files skipped, lines read with a warning,
    files in no known format, empty files ('' if none). Every command says it the same way."""
    parts = []
    files, lines = skips.files, skips.lines
    if lines:
        parts.append(count(lines, "line") + " skipped")
    if files:
        parts.append(count(files, "file") + " skipped")
    if skips.total_warned:
        parts.append(count(skips.total_warned, "line") + " read with a warning")
    if len(unrecognized):
        parts.append(count(len(unrecognized), "file") + " in no known format")
    if len(empty):
        parts.append(count(len(empty), "empty file"))
    return ", ".join(parts)

"""What every reader shares: options, the skip log, and JSON line helpers.

A reader is a module with:
- `NAME` (the `--trace-format` name), `HAS_SESSIONS` (False for formats such as
  Mooncake that carry no conversation id; `--scope auto` then means global),
- `sniff(path, head) -> bool`: True if the first bytes of the file are this format,
- `read(path, options, skips) -> Iterator[RequestBatch]`.

Readers never skip silently: every dropped line goes through `SkipLog.skip`, which counts it
by reason, keeps the first examples for the report, and raises instead under `--strict`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from xmemplan.errors import InputError, Skip

# Anything longer is "absurd" for one request: 100M tokens is ~50x the longest context windows.
MAX_PROMPT_TOKENS = 100_000_000


@dataclass
class ReadOptions:
    """Reader settings that come from the command line."""

    subagents: bool = False
    strict: bool = False
    tokenizer: str | None = None
    session_field: str | None = None
    timestamp_field: str | None = None


@dataclass
class SkipLog:
    """Counts skipped input by reason; `strict` turns the first skip into an InputError."""

    strict: bool = False
    counts: Counter[str] = field(default_factory=Counter)
    examples: list[Skip] = field(default_factory=list)
    max_examples: int = 20

    def skip(
        self, path: str | Path, line: int | None, reason: str, field_name: str | None = None
    ) -> None:
        if self.strict:
            raise InputError(
                reason, path=path, line=line, field=field_name,
                hint="fix the input, or drop --strict to skip and count such lines",
            )
        key = reason if field_name is None else f"{reason} ({field_name})"
        self.counts[key] += 1
        if len(self.examples) < self.max_examples:
            self.examples.append(Skip(str(path), line, key))

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def merge(self, other: SkipLog) -> None:
        self.counts.update(other.counts)
        room = self.max_examples - len(self.examples)
        self.examples.extend(other.examples[: max(room, 0)])


def iter_json_lines(
    path: Path, data: bytes, skips: SkipLog
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (line number, object) for each non-blank line; bad lines are skipped and counted.

    A last line without a newline that does not parse is reported as a truncated file.
    """
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
        yield i + 1, obj


def first_json_line(head: bytes) -> dict[str, Any] | None:
    """Parse the first non-blank line of `head` as a JSON object, or None."""
    for raw in head.split(b"\n"):
        if raw.strip():
            try:
                obj = orjson.loads(raw)
            except orjson.JSONDecodeError:
                return None
            return obj if isinstance(obj, dict) else None
    return None


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
) -> tuple[float | None, int, int | None, np.ndarray] | None:
    """The fields Mooncake and Qwen-Bailian rows share, checked; None if the row is skipped.

    Returns (timestamp as written, input_length, output_length, hash_ids); `hash_ids` must
    hold ceil(input_length / block) ids (the last block partial).
    """
    ts = obj.get("timestamp")
    if ts is not None and (isinstance(ts, bool) or not isinstance(ts, int | float)):
        skips.skip(path, line, f"expected a number of {ts_unit}", "timestamp")
        return None
    n = check_int(obj.get("input_length"), path, line, "input_length", skips)
    if n is None:
        return None
    out = obj.get("output_length")
    if out is not None:
        out = check_int(out, path, line, "output_length", skips)
        if out is None:
            return None
    ids = int_array(obj.get("hash_ids"), path, line, "hash_ids", skips)
    if ids is None:
        return None
    expected = -(-n // block)
    if ids.shape[0] != expected:
        skips.skip(
            path, line,
            f"{ids.shape[0]} block ids for {n} tokens (expected ceil({n}/{block}) = {expected})",
            "hash_ids",
        )
        return None
    return ts, n, out, ids

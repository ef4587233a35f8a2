"""xmemplan's own token-id format: JSONL or Parquet rows with `session_id`, optional
`timestamp` (seconds), `input_ids` (list of ints) and optional `output_tokens`.

    {"session_id": "s1", "timestamp": 0.0, "input_ids": [151644, 872, 198], "output_tokens": 12}
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from xmemplan.errors import InputError
from xmemplan.traces._build import BatchBuilder
from xmemplan.traces.base import (
    MAX_PROMPT_TOKENS,
    FileTime,
    ReadOptions,
    SkipLog,
    check_int,
    first_json_line,
    int_array,
    iter_json_lines,
    read_input,
)
from xmemplan.traces.schema import RequestBatch

if TYPE_CHECKING:  # numba loads only when a file of this format is read
    from xmemplan.traces.fastjson import Extracted

NAME = "tokens"
HAS_SESSIONS = True
READS_COMPRESSED = True
_PARQUET_MAGIC = b"PAR1"


def sniff(path: Path, head: bytes) -> bool:
    if head.startswith(_PARQUET_MAGIC):
        import polars as pl

        try:
            names = pl.read_parquet_schema(path).keys()
        except Exception:
            return False
        return "input_ids" in names and "session_id" in names
    obj = first_json_line(head)
    return obj is not None and "input_ids" in obj and "session_id" in obj


def _row(
    builder: BatchBuilder, path: Path, line: int | None, obj: dict[str, Any], skips: SkipLog,
    clock: FileTime, ids: np.ndarray | None = None,
) -> None:
    session = obj.get("session_id")
    if not isinstance(session, str | int) or isinstance(session, bool):
        skips.skip(path, line, "missing or not a string/integer", "session_id")
        return
    if ids is None:
        ids = int_array(obj.get("input_ids"), path, line, "input_ids", skips)
        if ids is None:
            return
    if ids.shape[0] > MAX_PROMPT_TOKENS:
        skips.skip(path, line, f"{ids.shape[0]:,} tokens is more than any model takes", "input_ids")
        return
    out = obj.get("output_tokens")
    if out is not None:
        out = check_int(out, path, line, "output_tokens", skips)
        if out is None:
            return
    ts = clock(obj.get("timestamp"), line)
    builder.add(str(session), ts, int(ids.shape[0]), ids, output_tokens=out)


def read(path: Path, options: ReadOptions, skips: SkipLog) -> Iterator[RequestBatch]:
    builder = BatchBuilder(str(path), block_tokens=1)
    clock = FileTime(path, skips, "seconds")
    data = read_input(path)
    if data[:4] == _PARQUET_MAGIC:
        import io

        import polars as pl

        try:
            frame = pl.read_parquet(io.BytesIO(data))
        except Exception as exc:
            raise InputError(f"cannot read Parquet ({exc})", path=path) from exc
        del data
        for i, row in enumerate(frame.iter_rows(named=True)):
            _row(builder, path, i + 1, row, skips, clock)
    else:
        by_line = _fast_ids(data)
        text = by_line.text if by_line is not None else data
        for line, obj in iter_json_lines(path, text, skips):
            ids = None
            # The scan emptied this line's list (`[]`); a null or a string here is the row's
            # own value, never a list the scan found in another field of the line.
            if by_line is not None and obj.get("input_ids") == []:
                k = by_line.line_index.get(line)
                ids = by_line.array(k) if k is not None else None
            _row(builder, path, line, obj, skips, clock, ids)
    clock.finish(builder.timestamp_s)
    if len(builder):
        yield builder.build()


class _ByLine:
    def __init__(self, fast: Extracted) -> None:
        self.text = fast.text
        self.array = fast.array
        self.line_index = {int(line): k for k, line in enumerate(fast.lines)}


def _fast_ids(data: bytes) -> _ByLine | None:
    """`input_ids` lists parsed by the byte scanner, by line; None to use the plain parser.

    Used only when every list sits on one line and no line holds two, so line numbers of the
    emptied text are those of the file.
    """
    from xmemplan.traces.fastjson import extract

    fast = extract(data, "input_ids")
    if fast is None or fast.text.count(b"\n") != data.count(b"\n"):
        return None
    by_line = _ByLine(fast)
    return by_line if len(by_line.line_index) == len(fast) else None

"""Mooncake FAST'25 traces: one JSON object per line, `timestamp` (ms, relative),
`input_length`, `output_length`, `hash_ids` (prefix-chained ids of 512-token blocks, global;
`len(hash_ids) == ceil(input_length / 512)`, the last block partial).

There is no session id: each request is its own session, and `--scope auto` is global.
Source: kvcache-ai/Mooncake `FAST25-release/traces/` (research/traces.md section 2).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from xmemplan.traces._build import BatchBuilder
from xmemplan.traces.base import (
    ReadOptions,
    SkipLog,
    block_row,
    first_json_line,
    iter_json_lines,
)
from xmemplan.traces.schema import RequestBatch

NAME = "mooncake"
HAS_SESSIONS = False
BLOCK_TOKENS = 512


def sniff(path: Path, head: bytes) -> bool:
    obj = first_json_line(head)
    return (
        obj is not None
        and "hash_ids" in obj
        and "input_length" in obj
        and "chat_id" not in obj
        and "parent_chat_id" not in obj
    )


def read(path: Path, options: ReadOptions, skips: SkipLog) -> Iterator[RequestBatch]:
    builder = BatchBuilder(str(path), block_tokens=BLOCK_TOKENS)
    stem = path.stem
    for line, obj in iter_json_lines(path, path.read_bytes(), skips):
        row = block_row(obj, path, line, skips, BLOCK_TOKENS, "milliseconds")
        if row is None:
            continue
        ts, n, out, ids = row
        builder.add(
            f"{stem}#{line}", None if ts is None else ts / 1000.0, n, ids, output_tokens=out
        )
    if len(builder):
        yield builder.build(complete_sessions=True)

"""Mooncake FAST'25 traces: one JSON object per line, `timestamp` (ms, relative),
`input_length`, `output_length`, `hash_ids` (prefix-chained ids of 512-token blocks, global;
`len(hash_ids) == ceil(input_length / 512)`, the last block partial).

There is no session id: each request is its own session, and `--scope auto` is global.
A request is named after its file and line (`traces/conversation#12`), the file as given
without its suffixes, so two files of the same name in different folders stay apart.
Source: kvcache-ai/Mooncake `FAST25-release/traces/` (research/traces.md section 2).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from xmemplan.traces._build import BatchBuilder
from xmemplan.traces.base import (
    FileTime,
    ReadOptions,
    SkipLog,
    block_row,
    first_json_line,
    iter_json_lines,
    read_input,
)
from xmemplan.traces.schema import RequestBatch

NAME = "mooncake"
HAS_SESSIONS = False
READS_COMPRESSED = True
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


def file_label(path: Path) -> str:
    """The path as given without its suffixes (`a/conv.jsonl.gz` -> `a/conv`)."""
    name = path.name
    for suffix in (".gz", ".xz", ".bz2", ".zst"):
        name = name.removesuffix(suffix)
    return str(path.with_name(Path(name).stem))


def read(path: Path, options: ReadOptions, skips: SkipLog) -> Iterator[RequestBatch]:
    builder = BatchBuilder(str(path), block_tokens=BLOCK_TOKENS)
    stem = file_label(path)
    clock = FileTime(path, skips, "milliseconds", scale=1e-3)
    for line, obj in iter_json_lines(path, read_input(path), skips):
        row = block_row(obj, path, line, skips, BLOCK_TOKENS, "milliseconds")
        if row is None:
            continue
        ts, n, out, ids = row
        builder.add(f"{stem}#{line}", clock(ts, line), n, ids, output_tokens=out)
    clock.finish(builder.timestamp_s)
    if len(builder):
        yield builder.build(complete_sessions=True)

"""Qwen-Bailian traces ("KVCache Cache in the Wild", Wang et al., ATC'25): JSONL with
`chat_id`, `parent_chat_id` (-1 for a root), `turn`, `timestamp` (s), `input_length`,
`output_length`, `type`, `hash_ids` (16-token blocks).

The ids hash each block on its own (salted SipHash of the block's tokens), so an id says
nothing about the blocks before it: keyed as they are, two requests that share a block at the
same position but not the prefix before it would count a false hit. The reader rebuilds
path-chained keys (key i = hash of ids 0..i). Sessions are the trees of `parent_chat_id`
links, named after their root `chat_id`.
Source: alibaba-edu/qwen-bailian-usagetraces-anon (research/traces.md section 2).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from xmemplan.traces._build import BatchBuilder
from xmemplan.traces.base import (
    FileTime,
    ReadOptions,
    SkipLog,
    block_row,
    check_int,
    first_json_line,
    iter_json_lines,
    read_input,
)
from xmemplan.traces.keys import chain
from xmemplan.traces.schema import RequestBatch

NAME = "bailian"
HAS_SESSIONS = True
READS_COMPRESSED = True
BLOCK_TOKENS = 16


def sniff(path: Path, head: bytes) -> bool:
    obj = first_json_line(head)
    return obj is not None and "hash_ids" in obj and "parent_chat_id" in obj


def read(path: Path, options: ReadOptions, skips: SkipLog) -> Iterator[RequestBatch]:
    rows: list[tuple[int, int, float | None, int, int | None, np.ndarray]] = []
    clock = FileTime(path, skips, "seconds")
    for line, obj in iter_json_lines(path, read_input(path), skips):
        chat = check_int(obj.get("chat_id"), path, line, "chat_id", skips, lo=0, hi=2**62)
        if chat is None:
            continue
        parent = check_int(
            obj.get("parent_chat_id", -1), path, line, "parent_chat_id", skips, lo=-1, hi=2**62
        )
        if parent is None:
            continue
        row = block_row(obj, path, line, skips, BLOCK_TOKENS, "seconds")
        if row is None:
            continue
        ts, n, out, ids = row
        rows.append((chat, parent, clock(ts, line), n, out, ids))
    times = [np.nan if r[2] is None else r[2] for r in rows]
    clock.finish(times)
    rows = [(c, p, t, n, o, i) for (c, p, _, n, o, i), t in zip(rows, times)]

    # Sessions: follow parent links to the root (iteratively; a parent that never appears
    # roots its own tree, a cycle is cut where it is found).
    parent_of = {r[0]: r[1] for r in rows}
    root_of: dict[int, int] = {}
    # Each chat is walked once (root_of memoizes); the walk's own membership test is a set:
    # a list made a session written child first quadratic (60,000 turns: 14 s).
    for chat, *_ in rows:
        path_seen = [chat]
        on_path = {chat}
        node = chat
        while True:
            if node in root_of:
                root = root_of[node]
                break
            p = parent_of.get(node, -1)
            if p == -1 or p not in parent_of or p in on_path:
                root = node
                break
            node = p
            path_seen.append(node)
            on_path.add(node)
        for c in path_seen:
            root_of[c] = root

    builder = BatchBuilder(str(path), block_tokens=BLOCK_TOKENS)
    if not rows:
        return
    lengths = np.array([r[5].shape[0] for r in rows], dtype=np.int64)
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    keys = chain(np.concatenate([r[5] for r in rows]), offsets)
    for i, (chat, _parent, ts, n, out, _ids) in enumerate(rows):
        builder.add(
            f"chat-{root_of[chat]}", ts, n, keys[offsets[i] : offsets[i + 1]], output_tokens=out
        )
    yield builder.build()

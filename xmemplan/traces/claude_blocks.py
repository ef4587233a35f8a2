"""Claude Code block traces (callanjfox/kv-cache-tester, SemiAnalysis AgentX): one JSON
object per file (or one per line for `traces.jsonl` releases):

    {id, models, block_size: 64, hash_id_scope: "local", tool_tokens, system_tokens,
     requests: [{t, type: "n"|"s", in, out, hash_ids, ...},
                {type: "subagent", t, agent_id, requests: [...]}], totals}

`hash_ids` are chained ids of FULL 64-token blocks (`len == in // 64`), local to the file:
they are namespaced per file and session so that a global cache cannot match across sessions
(a naive shared cache reports a false 99.8% hit; research/traces.md section 2), not even two
files that carry the same session `id`. Sub-agent requests
(`--subagents`) join the parent's session and namespace; their `t` is relative to the
sub-agent entry's `t`, and they are merged with the parent's requests by absolute time.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from xmemplan.traces.base import ReadOptions, SkipLog, check_int, int_array, read_input
from xmemplan.traces.keys import namespace
from xmemplan.traces.schema import NULL_INT, RequestBatch

if TYPE_CHECKING:  # numba loads only when a file of this format is read
    from xmemplan.traces.fastjson import Extracted

NAME = "claude-blocks"
HAS_SESSIONS = True
READS_COMPRESSED = True

_SNIFF = re.compile(rb'"(hash_id_scope|block_size)"\s*:')


def sniff(path: Path, head: bytes) -> bool:
    return head.lstrip()[:1] == b"{" and bool(_SNIFF.search(head)) and b'"requests"' in head


class _Ids:
    """Hands out each request's `hash_ids` from the fast scan, or parses them.

    The scan returns the lists in text order; the request lists of the parsed documents are
    walked in the same order (dicts keep key order) to pin each list to its request object.
    `aligned` is False when the counts disagree (a `hash_ids` somewhere else): the caller
    then reads the file with the plain parser.
    """

    def __init__(self, fast: Extracted | None, docs: list[tuple[int | None, Any]]) -> None:
        self.fast = fast
        self.index: dict[int, int] = {}
        if fast is None:
            self.aligned = True
            return

        def walk(reqs: list[Any]) -> None:
            for req in reqs:
                if isinstance(req, dict):
                    for key, value in req.items():
                        # Only a list the scan emptied (`[]`) is this request's: a null
                        # stays null (missing), never a list found in a nested field.
                        if key == "hash_ids" and value == []:
                            self.index[id(req)] = len(self.index)
                        elif key == "requests" and isinstance(value, list):
                            walk(value)

        for _, doc in docs:
            if isinstance(doc, dict):
                if "hash_ids" in doc:
                    self.index[id(doc)] = -1  # not a request: forces the plain parser
                reqs = doc.get("requests")
                if isinstance(reqs, list):
                    walk(reqs)
        self.aligned = len(self.index) == len(fast) and -1 not in self.index.values()

    def take(self, req: dict[str, Any], path: Path, line: int | None, skips: SkipLog):
        if self.fast is not None and id(req) in self.index:
            return self.fast.array(self.index[id(req)])
        return int_array(req.get("hash_ids"), path, line, "hash_ids", skips)


class _Label:
    """Where a request sits in the document (`requests[3].requests[0]`), made only if needed."""

    __slots__ = ("where", "i")

    def __init__(self, where: str, i: int) -> None:
        self.where = where
        self.i = i

    def __str__(self) -> str:
        return f"{self.where}[{self.i}]"

    def __format__(self, spec: str) -> str:
        return str(self)


def _session(
    doc: dict[str, Any], path: Path, line: int | None, options: ReadOptions, skips: SkipLog,
    id_source: _Ids,
) -> RequestBatch | None:
    """One session's requests (sorted by absolute time), or None if the document is unusable."""
    block = doc.get("block_size", 64)
    block = check_int(block, path, line, "block_size", skips, lo=1, hi=1 << 20)
    if block is None:
        return None
    requests = doc.get("requests")
    if not isinstance(requests, list):
        skips.skip(path, line, "missing or not a list", "requests")
        return None
    session = str(doc.get("id") or path.stem)
    # Local ids are namespaced by file and session: the same `id` in two files (two users'
    # sessions, or a copy) must not share cache entries under --scope global.
    space = f"{path.resolve()}\0{session}"
    local = doc.get("hash_id_scope", "local") != "global"
    rows: list[tuple[float, int, int, int | None, np.ndarray]] = []
    excluded = 0

    def add(reqs: list[Any], t0: float, where: str) -> None:
        nonlocal excluded
        for i, req in enumerate(reqs):
            label = _Label(where, i)
            if not isinstance(req, dict):
                skips.skip(path, line, f"{label} is not an object", "requests")
                continue
            ids = id_source.take(req, path, line, skips) if "hash_ids" in req else None
            t = req.get("t")
            if isinstance(t, bool) or not isinstance(t, int | float):
                skips.skip(path, line, f"{label}: missing or not a number of seconds", "t")
                continue
            if req.get("type") == "subagent":
                sub = req.get("requests")
                if not isinstance(sub, list):
                    skips.skip(path, line, f"{label}: sub-agent without a request list", "requests")
                elif options.subagents:
                    add(sub, t0 + t, f"{label}.requests")
                else:
                    excluded += len(sub)
                continue
            n = check_int(req.get("in"), path, line, "in", skips)
            if n is None:
                continue
            out = req.get("out")
            if out is not None:
                out = check_int(out, path, line, "out", skips)
                if out is None:
                    continue
            if ids is None:
                if "hash_ids" not in req:
                    skips.skip(path, line, f"{label}: missing field", "hash_ids")
                continue
            if ids.shape[0] != n // block:
                skips.skip(
                    path, line,
                    f"{label}: {ids.shape[0]} block ids for {n} tokens "
                    f"(expected {n} // {block} = {n // block} full blocks)",
                    "hash_ids",
                )
                continue
            rows.append((t0 + t, len(rows), n, out, ids))

    add(requests, 0.0, "requests")
    rows.sort(key=lambda r: (r[0], r[1]))  # merge sub-agents by absolute time, stable
    count = len(rows)
    lengths = np.fromiter((r[4].shape[0] for r in rows), dtype=np.int64, count=count)
    offsets = np.zeros(count + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    ids = np.concatenate([r[4] for r in rows]) if rows else np.empty(0, dtype=np.int64)
    batch = RequestBatch(
        source=str(path),
        session_id=[session] * count,
        timestamp_s=np.fromiter((r[0] for r in rows), dtype=np.float64, count=count),
        prompt_tokens=np.fromiter((r[2] for r in rows), dtype=np.int64, count=count),
        output_tokens=np.fromiter(
            (NULL_INT if r[3] is None else r[3] for r in rows), dtype=np.int64, count=count
        ),
        block_tokens=np.full(count, block, dtype=np.int64),
        keys=namespace(ids, space) if local else ids,
        key_offsets=offsets,
        complete_sessions=True,
    )
    if excluded:
        batch.extras["subagent_requests_excluded"] = excluded
    return batch


def _docs(data: bytes, path: Path, skips: SkipLog) -> list[tuple[int | None, Any]]:
    """One JSON document per file, or one per line (AgentX `traces.jsonl`)."""
    try:
        return [(None, orjson.loads(data))]
    except orjson.JSONDecodeError:
        pass
    lines = data.split(b"\n")
    if sum(1 for ln in lines if ln.strip()) <= 1:
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            skips.skip(path, None, "file is not UTF-8 text", whole_file=True)
            return []
        skips.skip(path, None, "malformed or truncated JSON document", whole_file=True)
        return []
    docs: list[tuple[int | None, Any]] = []
    for i, ln in enumerate(lines):
        if not ln.strip():
            continue
        try:
            docs.append((i + 1, orjson.loads(ln)))
        except orjson.JSONDecodeError:
            skips.skip(path, i + 1, "malformed JSON line")
    return docs


def read(path: Path, options: ReadOptions, skips: SkipLog) -> Iterator[RequestBatch]:
    raw = read_input(path)
    from xmemplan.traces.fastjson import extract

    fast = extract(raw, "hash_ids")
    id_source: _Ids | None = None
    if fast is not None:
        # The scan found every list in text order; use it only if the parser agrees.
        trial = SkipLog()
        docs = _docs(fast.text, path, trial)
        id_source = _Ids(fast, docs)
        if trial.total or not id_source.aligned:
            id_source = None
    if id_source is None:
        docs = _docs(raw, path, skips)
        id_source = _Ids(None, docs)
    for line, doc in docs:
        if not isinstance(doc, dict):
            skips.skip(path, line, "expected a JSON object")
            continue
        batch = _session(doc, path, line, options, skips, id_source)
        if batch is not None and (len(batch) or batch.extras):
            yield batch

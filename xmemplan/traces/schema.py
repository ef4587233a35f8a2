"""The canonical request table: the one place its column names are spelled.

One row per request. Keys (token ids, or prefix-chained and namespaced block ids) are kept
flat beside the scalar columns, as one int64 array and offsets into it, because that is what
the matcher consumes and what a list column would have to be flattened into anyway.

| column | dtype | meaning |
|---|---|---|
| `session_id` | str | conversation the request belongs to |
| `request_index` | int64 | order inside the session (0 = first request) |
| `timestamp_s` | float64, nullable | arrival time in seconds (relative or absolute) |
| `prompt_tokens` | int64 | prompt length in tokens |
| `output_tokens` | int64, nullable | output length in tokens |
| `block_tokens` | int64 | tokens per key: 1 for token-id traces, else the block size |
| `reported_cached_tokens` | int64, nullable | prompt tokens the API/engine served from cache |
| `reported_prompt_tokens` | int64, nullable | prompt length as that API/engine counted it |
| `keys` | list[int64] | the keys, flat in `RequestBatch.keys` |
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

SESSION_ID = "session_id"
REQUEST_INDEX = "request_index"
TIMESTAMP_S = "timestamp_s"
PROMPT_TOKENS = "prompt_tokens"
OUTPUT_TOKENS = "output_tokens"
BLOCK_TOKENS = "block_tokens"
REPORTED_CACHED_TOKENS = "reported_cached_tokens"
REPORTED_PROMPT_TOKENS = "reported_prompt_tokens"
KEYS = "keys"

# Result columns added by the matcher.
HIT_TOKENS = "hit_tokens"
HIT_RATIO = "hit_ratio"

NULL_INT = -1  # int columns use -1 for "not reported" in numpy; polars frames use null


@dataclass
class RequestBatch:
    """A chunk of the canonical table, in numpy, as a reader produces it.

    `complete_sessions` is True when no session in this batch continues in another batch
    (one file per session, as in the Claude Code block traces): the driver can then match it
    and drop it at once instead of holding the whole trace.
    """

    source: str
    session_id: list[str]
    timestamp_s: np.ndarray  # float64, NaN = unknown
    prompt_tokens: np.ndarray  # int64
    output_tokens: np.ndarray  # int64, NULL_INT = unknown
    block_tokens: np.ndarray  # int64
    keys: np.ndarray  # int64, flat
    key_offsets: np.ndarray  # int64, len(rows) + 1
    reported_cached_tokens: np.ndarray | None = None  # int64, NULL_INT = unknown
    reported_prompt_tokens: np.ndarray | None = None  # int64, NULL_INT = unknown
    complete_sessions: bool = False
    # Reader-specific extra figures for the summary (e.g. engine-reported totals).
    extras: dict[str, float] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.session_id)


def empty_int(n: int) -> np.ndarray:
    return np.full(n, NULL_INT, dtype=np.int64)


def concat_batches(batches: list[RequestBatch]) -> RequestBatch:
    """Concatenate batches into one (offsets re-based)."""
    if len(batches) == 1:
        return batches[0]
    sessions: list[str] = []
    for b in batches:
        sessions.extend(b.session_id)
    sizes = np.array([len(b.keys) for b in batches], dtype=np.int64)
    bases = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    offsets = [np.asarray(b.key_offsets[:-1]) + base for b, base in zip(batches, bases)]
    offsets.append(np.array([sizes.sum()], dtype=np.int64))

    def cat_opt(name: str) -> np.ndarray | None:
        parts = [getattr(b, name) for b in batches]
        if all(p is None for p in parts):
            return None
        filled = [p if p is not None else empty_int(len(b)) for p, b in zip(parts, batches)]
        return np.concatenate(filled)

    return RequestBatch(
        source="+".join(sorted({b.source for b in batches})) if len(batches) < 4 else "(many)",
        session_id=sessions,
        timestamp_s=np.concatenate([b.timestamp_s for b in batches]),
        prompt_tokens=np.concatenate([b.prompt_tokens for b in batches]),
        output_tokens=np.concatenate([b.output_tokens for b in batches]),
        block_tokens=np.concatenate([b.block_tokens for b in batches]),
        keys=np.concatenate([b.keys for b in batches]),
        key_offsets=np.concatenate(offsets).astype(np.int64),
        reported_cached_tokens=cat_opt("reported_cached_tokens"),
        reported_prompt_tokens=cat_opt("reported_prompt_tokens"),
        complete_sessions=all(b.complete_sessions for b in batches),
    )

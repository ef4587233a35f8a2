"""Driver of the radix-tree kernel: validates arrays, sizes the tree once, runs it."""

from __future__ import annotations

import numpy as np

from xmemplan.prefix.kernels import match_insert


def check_requests(
    keys: np.ndarray, offsets: np.ndarray, resets: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Contiguous int64 keys and offsets, bool resets; ValueError if they do not fit."""
    keys = np.ascontiguousarray(keys, dtype=np.int64)
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    resets = np.ascontiguousarray(resets, dtype=np.bool_)
    n = offsets.shape[0] - 1
    if resets.shape[0] != n:
        raise ValueError("resets must have one entry per request")
    if offsets[0] != 0 or offsets[-1] != keys.shape[0] or np.any(np.diff(offsets) < 0):
        raise ValueError("offsets must rise from 0 to len(keys)")
    return keys, offsets, resets


def tree_sizes(resets: np.ndarray) -> tuple[np.ndarray, int, int]:
    """(resets with the first set, nodes, table slots) for the largest tree between resets.

    Each request adds at most a split node and a leaf: 1 + 2 x requests nodes; the child
    table is a power of two at least twice that (load <= 0.5).
    """
    n = resets.shape[0]
    resets = resets.copy()
    resets[0] = True
    starts = np.flatnonzero(resets)
    ends = np.append(starts[1:], n)
    nodes = 1 + 2 * int(np.max(ends - starts))
    table = 1 << max(4, int(2 * nodes - 1).bit_length())
    return resets, nodes, table


def match(keys: np.ndarray, offsets: np.ndarray, resets: np.ndarray) -> np.ndarray:
    """Leading keys of each request found in the cache built from the requests before it.

    `keys` (int64) holds every request's keys back to back, request r being
    `keys[offsets[r]:offsets[r + 1]]`; `resets[r]` empties the cache before request r (the
    first request of each session under `--scope session`). The cache is infinite.
    """
    keys, offsets, resets = check_requests(keys, offsets, resets)
    n = offsets.shape[0] - 1
    if n == 0:
        return np.empty(0, dtype=np.int64)
    resets, nodes, table = tree_sizes(resets)
    out = np.empty(n, dtype=np.int64)
    match_insert(
        keys,
        offsets,
        resets,
        out,
        np.empty(nodes, dtype=np.int64),
        np.empty(nodes, dtype=np.int64),
        np.empty(table, dtype=np.int64),
        np.empty(table, dtype=np.int64),
        np.empty(table, dtype=np.int64),
        np.full(table, -1, dtype=np.int64),
    )
    return out

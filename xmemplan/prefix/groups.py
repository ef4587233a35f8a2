"""Prefix groups across sessions: which requests of different sessions start alike, and
for how many tokens (profile `requests_sample.prefix_group`, `prefix_group_tokens`;
docs/profile.md "Prefix groups").

A request's prefix at depth d (tokens) is summarised by a fingerprint: the sum over its
first d / block keys of key x a fixed pseudo-random weight per position (mod 2^64), so
equal prefixes give equal fingerprints (and unequal ones collide with probability about
2^-64). Depths are a fixed grid (64 tokens x 2^(k/2), up to 2^21 tokens): a group's prefix
length is known to within a factor of sqrt(2), rounded down to the grid (at a depth that
is not a whole number of blocks, the fingerprint covers the whole blocks below it).
"""

from __future__ import annotations

import numpy as np

DEPTHS = np.unique(np.round(64 * 2.0 ** (np.arange(0, 31) / 2)).astype(np.int64))
_MASK = np.uint64(0xFFFFFFFFFFFFFFFF)


def _weights(n: int) -> np.ndarray:
    """splitmix64 of positions 1..n: the fixed per-position weights (odd)."""
    with np.errstate(over="ignore"):
        z = np.arange(1, n + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return z | np.uint64(1)


def fingerprints(keys: np.ndarray, offsets: np.ndarray, block: np.ndarray) -> np.ndarray:
    """(requests, len(DEPTHS)) uint64: each request's prefix fingerprint at each depth
    (0 where the request is shorter than the depth). `keys[offsets[i]:offsets[i+1]]` are
    request i's keys, each `block[i]` tokens."""
    n = len(offsets) - 1
    out = np.zeros((n, len(DEPTHS)), np.uint64)
    if n == 0 or len(keys) == 0:
        return out
    lengths = np.diff(offsets)
    pos = np.arange(len(keys), dtype=np.int64) - np.repeat(offsets[:-1], lengths)
    with np.errstate(over="ignore"):
        w = keys.astype(np.uint64) * _weights(int(lengths.max()))[pos]
        csum = np.concatenate([np.zeros(1, np.uint64), np.cumsum(w, dtype=np.uint64)])
        blk = np.maximum(1, np.asarray(block, np.int64))
        for k, depth in enumerate(DEPTHS):
            d = depth // blk
            ok = (d >= 1) & (d <= lengths)
            i = np.flatnonzero(ok)
            out[i, k] = (csum[offsets[i] + d[i]] - csum[offsets[i]]) + np.uint64(k + 1)
    return out


def groups(fp: np.ndarray, session: np.ndarray, prompt: np.ndarray, block: np.ndarray
           ) -> tuple[np.ndarray, np.ndarray]:
    """(group, group_tokens) per request: the longest grid depth at which its prefix is
    also another session's (tokens, at most its prompt), and a group id shared by the
    requests that start alike (-1, 0: no other session starts like it)."""
    n = fp.shape[0]
    gtok = np.zeros(n, np.int64)
    if n == 0:
        return np.full(0, -1, np.int64), gtok
    sess = np.asarray(session, np.int64)
    blk = np.maximum(1, np.asarray(block, np.int64))
    for k, depth in enumerate(DEPTHS):
        col = fp[:, k]
        valid = col != 0
        if not valid.any():
            continue
        pairs = np.unique(np.stack([col[valid].view(np.int64), sess[valid]], axis=1), axis=0)
        u, cnt = np.unique(pairs[:, 0], return_counts=True)
        shared_fp = u[cnt >= 2]
        shared = np.zeros(n, bool)
        shared[valid] = np.isin(col[valid].view(np.int64), shared_fp)
        gtok = np.where(shared, depth // blk * blk, gtok)
    gtok = np.minimum(gtok, np.asarray(prompt, np.int64))
    has = gtok > 0
    group = np.full(n, -1, np.int64)
    if has.any():
        # the group: the fingerprint at the shallowest depth the request reaches (its
        # first whole block or more)
        first = np.argmax(fp != 0, axis=1)
        head = fp[np.arange(n), first].view(np.int64)
        _, inv = np.unique(head[has], return_inverse=True)
        group[has] = inv.reshape(-1)
    return group, gtok

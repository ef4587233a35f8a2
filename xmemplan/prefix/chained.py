"""Prefix matching of prefix-CHAINED keys in plain numpy: no numba to load for small inputs.

When every key always follows the same key (or always opens a request), a key names its
whole prefix, as Mooncake's block ids do (research/traces.md section 2: 0 conflicts). Then
a request's leading i keys are cached exactly when its i-th key was seen in an earlier
request, and the longest cached prefix is the leading run of keys whose first occurrence is
in an earlier request: a sort, not a tree walk. `match_chained` checks the property and
returns None when it does not hold (the caller then runs the radix tree); tests hold it to
`xmemplan.prefix.matcher.match`.

Starting numba and loading a cached kernel costs about 0.3 s per process (docs/performance.md),
more than this takes on the 288,500 keys of the Mooncake conversation trace (~30 ms).
"""

from __future__ import annotations

import numpy as np

# Above this many keys the radix tree (1e9 keys/s) beats the sorts (~10 M keys/s here) even
# with numba's start-up.
MAX_KEYS = 2_000_000


def match_chained(keys: np.ndarray, offsets: np.ndarray) -> np.ndarray | None:
    """Leading keys of each request seen in the requests before it (one cache, no resets),
    or None if the keys are not prefix-chained."""
    keys = np.asarray(keys, dtype=np.int64)
    offsets = np.asarray(offsets, dtype=np.int64)
    n = offsets.shape[0] - 1
    total = keys.shape[0]
    if n <= 0 or total == 0:
        return np.zeros(max(n, 0), dtype=np.int64)
    lengths = np.diff(offsets)
    req = np.repeat(np.arange(n, dtype=np.int64), lengths)
    pos = np.arange(total, dtype=np.int64) - offsets[req]
    order = np.argsort(keys, kind="stable")  # stable: a key's first occurrence comes first
    sk = keys[order]
    new = np.empty(total, dtype=bool)
    new[0] = True
    np.not_equal(sk[1:], sk[:-1], out=new[1:])
    # Chained: every occurrence of a key has the first occurrence's predecessor (a request
    # start counts as a predecessor of its own, distinct from every key) and position.
    first = np.flatnonzero(new)
    group = np.cumsum(new) - 1
    head = order[first][group]  # flat index of each occurrence's key's first occurrence
    at = order
    if not np.array_equal(pos[at], pos[head]):
        return None
    inner = pos[at] > 0
    if not np.array_equal(keys[at[inner] - 1], keys[head[inner] - 1]):
        return None
    seen = np.empty(total, dtype=bool)
    seen[at] = req[head] < req[at]
    # leading run of seen keys per request: the first unseen position, else the length
    where = np.where(seen, np.iinfo(np.int64).max, pos)
    nonempty = lengths > 0
    out = lengths.copy()
    if nonempty.any():
        first_miss = np.minimum.reduceat(where, offsets[:-1][nonempty])
        out[nonempty] = np.minimum(first_miss, lengths[nonempty])
    return out

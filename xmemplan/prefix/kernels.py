"""numba kernels of the radix tree (path-compressed trie) over int64 keys.

Kernels take only arrays and scalars. The tree is flat:
- edges: an edge is `keys[e_start[n] : e_start[n] + e_len[n]]`, a slice of the input itself
  (the request that created it), so inserting copies nothing. Labels are never moved: a split
  only shortens the old edge and points the new node at its front, so matching a long shared
  prefix is a run of sequential compares.
- children: one open-addressing hash table keyed by (parent node, first key of the edge),
  probed linearly; a slot is live when `t_epoch[slot] == epoch`, so emptying the tree (a new
  session in `--scope session`) is one increment instead of a clear.

Each insert adds at most one split node and one leaf, so `1 + 2 x requests` nodes always
suffice: the driver sizes the arrays once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
from numba import njit

from xmemplan import numba_load

# cached kernels load without numba's compiler registries (0.12 s of a command's start)
numba_load.install()

EMPTY = -1

_F = TypeVar("_F", bound=Callable[..., Any])


def no_runtime(fn: _F) -> _F:
    """`njit(cache=True)` without numba's runtime (NRT). A kernel that allocates nothing
    needs no reference counts, yet with the runtime every array an inlined helper binds
    costs an atomic NRT_incref / NRT_decref pair per call, in the hot loops (15-30 % of the
    engine models' replays and of the engine simulator's loop by `perf`: docs/performance.md,
    round 6). numba refuses to compile an allocation without it, and a kernel it calls
    inherits it unless that kernel says otherwise (`with_runtime`)."""
    return njit(cache=True, _nrt=False)(fn)  # type: ignore[no-any-return]


def with_runtime(fn: _F) -> _F:
    """`njit(cache=True)` with the runtime even when a `no_runtime` kernel calls it: for a
    rarely called kernel that allocates (its arrays are counted and freed as usual)."""
    return njit(cache=True, _nrt=True)(fn)  # type: ignore[no-any-return]


@njit(cache=True, inline="always")
def _slot(node: int, key: int, mask: int) -> int:
    x = np.uint64(key) ^ (np.uint64(node) * np.uint64(0x9E3779B97F4A7C15))
    x = (x ^ (x >> np.uint64(31))) * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(29))
    return int(np.int64(x & np.uint64(mask)))


@njit(cache=True, inline="always")
def _common(x: np.ndarray, a: int, y: np.ndarray, b: int, lim: int) -> int:
    """Length of the common run of x[a:] and y[b:], at most lim."""
    i = 0
    # Blocks of 8 without an early exit let LLVM vectorize the compare.
    while i + 8 <= lim:
        d = np.int64(0)
        for j in range(8):
            d |= x[a + i + j] ^ y[b + i + j]
        if d != 0:
            break
        i += 8
    while i < lim and x[a + i] == y[b + i]:
        i += 1
    return i


# The child table: open addressing over (node, first key of the edge) -> child; a slot is in
# use when its epoch is the current one. Shared by match_insert and the engine cache models
# (engine_kernels.py).
@njit(cache=True, inline="always")
def _find_child(t_node, t_key, t_child, t_epoch, epoch, node, k, mask):
    """The child of `node` whose edge starts with key `k`, or EMPTY."""
    slot = _slot(node, k, mask)
    while t_epoch[slot] == epoch:
        if t_node[slot] == node and t_key[slot] == k:
            return t_child[slot]
        slot = (slot + 1) & mask
    return np.int64(EMPTY)


@njit(cache=True, inline="always")
def _set_child(t_node, t_key, t_child, t_epoch, epoch, node, k, child, mask):
    """Point `node`'s existing edge that starts with `k` at `child` (after a split)."""
    slot = _slot(node, k, mask)
    while not (t_node[slot] == node and t_key[slot] == k and t_epoch[slot] == epoch):
        slot = (slot + 1) & mask
    t_child[slot] = child


@njit(cache=True, inline="always")
def _add_child(t_node, t_key, t_child, t_epoch, epoch, node, k, child, mask):
    """Add the edge `node` -k-> `child` in the first free slot."""
    slot = _slot(node, k, mask)
    while t_epoch[slot] == epoch:
        slot = (slot + 1) & mask
    t_node[slot] = node
    t_key[slot] = k
    t_child[slot] = child
    t_epoch[slot] = epoch


@njit(cache=True)
def match_insert(
    keys: np.ndarray,  # int64, all requests' keys, flat
    offsets: np.ndarray,  # int64, n_requests + 1
    resets: np.ndarray,  # bool, empty the tree before request r
    out_matched: np.ndarray,  # int64, n_requests: leading keys found in the tree
    e_start: np.ndarray,  # int64, >= 1 + 2 x requests of the largest tree
    e_len: np.ndarray,  # int64, same size
    t_node: np.ndarray,  # int64, table size (a power of two, >= 2 x nodes)
    t_key: np.ndarray,  # int64, table size
    t_child: np.ndarray,  # int64, table size
    t_epoch: np.ndarray,  # int64, table size, starts all -1
) -> None:
    """For each request in order: count its longest cached prefix, then insert it."""
    mask = np.int64(t_node.shape[0] - 1)
    epoch = np.int64(0)
    n_nodes = np.int64(1)  # node 0 is the root (empty edge)
    for r in range(offsets.shape[0] - 1):
        if resets[r]:
            epoch += 1
            n_nodes = np.int64(1)
        s = offsets[r]
        n = offsets[r + 1] - s
        node = np.int64(0)
        pos = np.int64(0)
        split_child = np.int64(EMPTY)
        split_at = np.int64(0)
        while pos < n:
            # child of `node` whose edge starts with keys[s + pos]
            k = keys[s + pos]
            child = _find_child(t_node, t_key, t_child, t_epoch, epoch, node, k, mask)
            if child == EMPTY:
                break
            length = e_len[child]
            lim = min(length, n - pos)
            m = _common(keys, e_start[child], keys, s + pos, lim)
            pos += m
            if m < length:
                if m < lim:  # mismatch inside the edge: split it there
                    split_child = child
                    split_at = m
                break
            node = child
        out_matched[r] = pos
        if pos == n:
            continue
        if split_child != EMPTY:
            c = split_child
            mid = n_nodes
            n_nodes += 1
            e_start[mid] = e_start[c]
            e_len[mid] = split_at
            # the parent's slot for this edge now leads to `mid`
            _set_child(t_node, t_key, t_child, t_epoch, epoch, node, keys[e_start[c]], mid, mask)
            e_start[c] += split_at
            e_len[c] -= split_at
            _add_child(t_node, t_key, t_child, t_epoch, epoch, mid, keys[e_start[c]], c, mask)
            node = mid
        leaf = n_nodes
        n_nodes += 1
        e_start[leaf] = s + pos
        e_len[leaf] = n - pos
        _add_child(t_node, t_key, t_child, t_epoch, epoch, node, keys[s + pos], leaf, mask)

"""SGLang's KV pool for the simulated engine: one radix tree per replica on a paged pool (numba).

With `--engine sglang` the replica's HBM is SGLang 0.5.23's `RadixCache` over its paged
token pool, not vLLM's free-block queue (pool.py):

- a request's cached prefix is `match_prefix` of its first `prompt + output so far - 1`
  tokens, page-aligned (`Req._compute_max_prefix_len`, `RadixKey.page_aligned`); the walk
  stamps its path with one access time and splits the edge where the key ends inside it
  (the part split off keeps the path's time);
- an admitted request locks its matched node (`inc_lock_ref`): locked pages are not
  evictable;
- a prefill batch asks for its new tokens plus one page per request
  (`alloc_paged_token_slots_extend`'s over-estimate; exactly its new tokens at page size
  1); a decode step asks for one page per running request (`alloc_paged_token_slots_
  decode`; one token each at page size 1), and its memory check for the pages it takes
  (`check_decode_mem`). When the free pages hold fewer tokens than asked, `RadixCache.
  evict` frees the shortfall: whole unlocked leaves, least recently used first, until at
  least the shortfall is freed (a leaf can hold a whole session: it over-evicts);
- when a prefill is done, what it computed enters the tree (`checkpoint_kv_cache` ->
  `RadixCache.checkpoint`: the page-aligned insert, the prompt split off as its own node,
  duplicates freed, the lock moved to the new last node);
- a finished request is checkpointed over its whole KV (prompt and outputs but the last
  token), the rest of its row is freed and its lock dropped (`release_kv_cache(
  checkpoint=True)`); a retracted one frees its row past the tree and drops its lock
  without inserting (`release_req`), and the scheduler then frees `20 x requests still
  running` tokens (`SGLANG_RETRACT_DECODE_STEPS`).

The tree moves are the SGLang cache model's kernels (xmemplan/prefix/engine_kernels.py:
`_walk`, `_checkpoint`, `_release_tree`, `_lock`, `_unlock`, `_evict`), on one node table
with a root per replica. Page keys are the engine's block keys (equal keys, equal
prefixes). `reference.RadixPoolRef` is the same pool in plain Python (the hitrate
reference's SGLangCache); tests/test_engine.py drives both with the same operations.

Tables: node rows never move while a request holds one, except in `_gc`, which renumbers
the live nodes in order (ids keep their order, so ties break as before) when the node
table is full; a replica's lazy heap is compacted (stale entries dropped) when full. When
neither makes room the pool sets G_OVER, every operation stops changing anything and the
loop ends: the caller runs again with larger tables (engine.run).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from xmemplan.prefix.engine_kernels import (
    AL,
    EL,
    ES,
    LK,
    NC,
    PA,
    ST,
    _checkpoint,
    _evict,
    _heap_push,
    _lock,
    _put,
    _unlock,
    _walk,
)
from xmemplan.prefix.kernels import no_runtime, with_runtime

EMPTY = -1
MK = 7  # nd column: the mark of a heap compaction (kept entries)
# g: globals of the pool
G_CLOCK, G_NODES, G_EPOCH, G_OVER = range(4)
N_G = 4
# rq: per replica
RQ_AVAIL, RQ_EVICT, RQ_HSIZE, RQ_VER, RQ_K0, RQ_N, RQ_SEEN, RQ_POS, RQ_NODE = range(9)
N_RQ = 9
# RQ_VER counts the tree's changes (stamps, inserts, evictions); RQ_K0 / RQ_N / RQ_SEEN /
# RQ_POS / RQ_NODE: the last match (its keys, the count then, its result). Matching the
# same keys again with nothing changed since finds the same and only stamps the same path,
# which is already the most recent: skipped (the waiting head is matched at every step)
Q_NFREE = 2  # pool.py's Q column the policies read: pages free or evictable


@njit(cache=True)
def radix_new(R: int, nb: int, nodes: int, heap: int, longest: int) -> tuple:  # type: ignore[type-arg,unused-ignore]
    """R replicas of nb pages each: a node table of `nodes` rows (R roots), a child table
    of at least twice that, a lazy heap of `heap` entries per replica; `longest`: the
    most keys of one request."""
    nn = max(nodes, R + 16)
    t = 16
    while t < 2 * nn:
        t *= 2
    nd = np.zeros((nn, 8), np.int64)
    for r in range(R):
        nd[r, PA] = EMPTY
        nd[r, LK] = 1
        nd[r, AL] = 1
    tb = np.zeros((t, 4), np.int64)  # epochs from 1: zero rows are empty
    hc = max(heap, 16)
    ht = np.empty((R, hc), np.int64)  # written before read
    hn = np.empty((R, hc), np.int64)
    rq = np.zeros((R, N_RQ), np.int64)
    for r in range(R):
        rq[r, RQ_AVAIL] = nb
        rq[r, RQ_SEEN] = -1
    g = np.zeros(N_G, np.int64)
    g[G_CLOCK] = 1
    g[G_NODES] = R
    g[G_EPOCH] = 1
    path = np.zeros(longest + 4, np.int64)
    return nd, tb, ht, hn, rq, g, path


@njit(cache=True, inline="always")
def _sync(S, Q, r):  # noqa: ANN001, ANN202
    Q[r, Q_NFREE] = S[4][r, RQ_AVAIL] + S[4][r, RQ_EVICT]


@with_runtime
def _compact(S, r):  # noqa: ANN001, ANN202
    """Replica r's heap without stale entries (each evictable leaf once)."""
    nd, ht, hn, rq = S[0], S[2], S[3], S[4]
    n = rq[r, RQ_HSIZE]
    kt = np.empty(n, np.int64)
    kn = np.empty(n, np.int64)
    for j in range(n):  # MK: 0 for a live entry's node, 1 once kept
        x = hn[r, j]
        nd[x, MK] = 0
    k = 0
    for j in range(n):
        x = hn[r, j]
        if nd[x, AL] == 1 and nd[x, NC] == 0 and nd[x, LK] == 0 and nd[x, ST] == ht[r, j] \
                and nd[x, MK] == 0:
            nd[x, MK] = 1
            kt[k] = ht[r, j]
            kn[k] = x
            k += 1
    hs = 0
    h_time, h_node = ht[r], hn[r]
    for j in range(k):
        hs = _heap_push(h_time, h_node, hs, kt[j], kn[j])
    rq[r, RQ_HSIZE] = hs


@with_runtime
def _gc(S, RI, r_node, keys, R):  # noqa: ANN001, ANN202
    """Renumber the live nodes 0.. in order (roots stay 0..R-1), rebuild the child table
    (a new epoch) and the heaps; requests' locked nodes (RI[:, r_node]) follow."""
    nd, tb, ht, hn, rq, g = S[0], S[1], S[2], S[3], S[4], S[5]
    n_nodes = g[G_NODES]
    new = np.full(n_nodes, EMPTY, np.int64)
    k = 0
    for x in range(n_nodes):
        if nd[x, AL] == 1:
            new[x] = k
            k += 1
    for x in range(n_nodes):
        y = new[x]
        if y < 0:
            continue
        for c in range(8):
            nd[y, c] = nd[x, c]
        if nd[y, PA] >= 0:
            nd[y, PA] = new[nd[y, PA]]
    for i in range(RI.shape[0]):
        if RI[i, r_node] >= 0:
            RI[i, r_node] = new[RI[i, r_node]]
    g[G_NODES] = k
    g[G_EPOCH] += 1
    epoch = g[G_EPOCH]
    mask = tb.shape[0] - 1
    for y in range(R, k):
        _put(tb, epoch, mask, nd[y, PA], keys[nd[y, ES]], y)
    for r in range(R):
        rq[r, RQ_HSIZE] = 0
        rq[r, RQ_VER] += 1
    for y in range(R, k):
        if nd[y, NC] == 0 and nd[y, LK] == 0:
            x = y
            while x >= R:
                x = nd[x, PA]
            rq[x, RQ_HSIZE] = _heap_push(ht[x], hn[x], rq[x, RQ_HSIZE], nd[y, ST], y)


@njit(cache=True, inline="always")
def _room(S, RI, r_node, keys, r):  # noqa: ANN001, ANN202
    """Room for one tree operation (at most 3 new nodes and 8 heap pushes); False (and
    G_OVER set) when the tables are too small for the run."""
    if S[5][G_OVER] != 0:
        return False
    if S[5][G_NODES] + 8 > S[0].shape[0]:
        _gc(S, RI, r_node, keys, S[4].shape[0])
    if S[4][r, RQ_HSIZE] + 8 > S[2].shape[1]:
        _compact(S, r)
    if S[5][G_NODES] + 8 > S[0].shape[0] or S[4][r, RQ_HSIZE] + 8 > S[2].shape[1]:
        S[5][G_OVER] = 1
        return False
    return True


@njit(cache=True, inline="always")
def radix_cached(rq, r, k0, n):  # noqa: ANN001, ANN201
    """(True, pages, node) when the last match of replica r was of the same keys and the
    tree has not changed since (radix_walk would find the same: module doc), else False.
    (The step loop's fast paths take S's arrays, not S: binding a tuple of arrays counts
    a reference per array, which cost the engine more than the tree did.)"""
    if rq[r, RQ_SEEN] == rq[r, RQ_VER] and rq[r, RQ_K0] == k0 and rq[r, RQ_N] == n:
        return True, rq[r, RQ_POS], rq[r, RQ_NODE]
    return False, 0, r


@no_runtime
def radix_walk(S, RI, r_node, keys, r, k0, n):  # noqa: ANN001, ANN201
    """match_prefix of keys[k0:k0+n] (n >= 1) in replica r's tree: (pages matched, last
    node)."""
    rq = S[4]
    if not _room(S, RI, r_node, keys, r):
        return 0, r
    nd, tb, ht, hn, g = S[0], S[1], S[2], S[3], S[5]
    pos, node, clock, n_nodes, hs = _walk(keys, k0, n, nd, tb, g[G_EPOCH], tb.shape[0] - 1,
                                          ht[r], hn[r], g[G_CLOCK], g[G_NODES],
                                          rq[r, RQ_HSIZE], r)
    if node != r and nd[node, NC] == 0 and nd[node, LK] == 0:
        # a leaf matched whole has a new access time: pushed again (the cache model's
        # replay locks it at once and its unlock pushes it; here a waiting request may
        # match and not be admitted)
        hs = _heap_push(ht[r], hn[r], hs, nd[node, ST], node)
    g[G_CLOCK] = clock
    g[G_NODES] = n_nodes
    rq[r, RQ_HSIZE] = hs
    rq[r, RQ_VER] += 1
    rq[r, RQ_SEEN] = rq[r, RQ_VER]
    rq[r, RQ_K0] = k0
    rq[r, RQ_N] = n
    rq[r, RQ_POS] = pos
    rq[r, RQ_NODE] = node
    return pos, node


@njit(cache=True, inline="always")
def radix_path_evictable(nd, node, r):  # noqa: ANN001, ANN201
    """Pages that locking `node` takes out of the evictable set."""
    c = 0
    x = node
    while x != r:
        if nd[x, LK] == 0:
            c += nd[x, EL]
        x = nd[x, PA]
    return c


@njit(cache=True, inline="always")
def radix_lock(nd, rq, Q, r, node):  # noqa: ANN001, ANN201
    rq[r, RQ_EVICT] = _lock(nd, node, r, rq[r, RQ_EVICT], -1)
    Q[r, Q_NFREE] = rq[r, RQ_AVAIL] + rq[r, RQ_EVICT]


@njit(cache=True, inline="always")
def radix_short(rq, r, tokens, bs):  # noqa: ANN001, ANN201
    """evict_from_tree_cache(tokens)'s shortfall: tokens to evict (0: none, or nothing is
    evictable); the caller then calls radix_evict."""
    short = tokens - rq[r, RQ_AVAIL] * bs
    return short if short > 0 and rq[r, RQ_EVICT] > 0 else 0


@no_runtime
def radix_evict(S, Q, keys, r, short, bs):  # noqa: ANN001, ANN201
    """RadixCache.evict(short tokens) in replica r's tree."""
    rq, tb = S[4], S[1]
    freed, hs = _evict(S[0], tb, S[5][G_EPOCH], tb.shape[0] - 1, keys, S[2][r], S[3][r],
                       rq[r, RQ_HSIZE], short, bs, r)
    rq[r, RQ_HSIZE] = hs
    rq[r, RQ_AVAIL] += freed
    rq[r, RQ_EVICT] -= freed
    rq[r, RQ_VER] += 1
    _sync(S, Q, r)


@njit(cache=True, inline="always")
def radix_take(rq, Q, r, pages):  # noqa: ANN001, ANN201
    """Allocate `pages` free pages (the caller made room)."""
    rq[r, RQ_AVAIL] -= pages
    Q[r, Q_NFREE] = rq[r, RQ_AVAIL] + rq[r, RQ_EVICT]


@no_runtime
def _checkpoint_k(keys, ss, key_n, prompt_n, old, protected, nd, tb, epoch, mask, h_time,  # noqa: ANN001, ANN202
                  h_node, clock, n_nodes, hsize, free_pages, evictable, path,
                  protected_pos, stamp_above, root):
    """engine_kernels._checkpoint as a kernel of its own: radix_checkpoint and
    radix_release (its _release_tree) call one compilation of it instead of each inlining
    it (the first run's compile: docs/performance.md round 9)."""
    return _checkpoint(keys, ss, key_n, prompt_n, old, protected, nd, tb, epoch, mask,
                       h_time, h_node, clock, n_nodes, hsize, free_pages, evictable, path,
                       protected_pos, stamp_above, root)


@no_runtime
def radix_checkpoint(S, Q, RI, r_node, r_prot, keys, r, i, k0, key_n, prompt_n):  # noqa: ANN001, ANN201
    """RadixCache.checkpoint(req, up_to = key_n pages): request i's lock (RI[i, r_node],
    over RI[i, r_prot] pages) moves to the node where its first key_n pages end."""
    if not _room(S, RI, r_node, keys, r):
        return
    nd, tb, ht, hn, rq, g, path = S
    old = RI[i, r_node]
    prot = RI[i, r_prot]
    # (np.bool_: radix_release passes it too, and one type of it compiles once)
    last, clock, n_nodes, hs, avail, ev = _checkpoint_k(
        keys, k0, key_n, prompt_n, old, prot, nd, tb, g[G_EPOCH], tb.shape[0] - 1, ht[r],
        hn[r], g[G_CLOCK], g[G_NODES], rq[r, RQ_HSIZE], rq[r, RQ_AVAIL], rq[r, RQ_EVICT],
        path, prot, np.bool_(True), r)
    g[G_CLOCK] = clock
    g[G_NODES] = n_nodes
    rq[r, RQ_HSIZE] = hs
    rq[r, RQ_AVAIL] = avail
    rq[r, RQ_EVICT] = ev
    rq[r, RQ_VER] += 1
    RI[i, r_node] = last
    RI[i, r_prot] = key_n
    _sync(S, Q, r)


@no_runtime
def radix_release(S, Q, RI, r_node, r_prot, keys, r, i, k0, key_n, prompt_n, held, insert):  # noqa: ANN001, ANN201
    """Request i lets go of its `held` pages: release_kv_cache(checkpoint=insert)."""
    nd, tb, ht, hn, rq, g, path = S
    if not _room(S, RI, r_node, keys, r):
        return
    if insert:
        # engine_kernels._release_tree: the checkpoint, then the lock dropped
        prot = RI[i, r_prot]
        last, clock, n_nodes, hs, avail, ev = _checkpoint_k(
            keys, k0, key_n, prompt_n, RI[i, r_node], prot, nd, tb, g[G_EPOCH],
            tb.shape[0] - 1, ht[r], hn[r], g[G_CLOCK], g[G_NODES], rq[r, RQ_HSIZE],
            rq[r, RQ_AVAIL], rq[r, RQ_EVICT], path, prot, np.bool_(False), r)
        ev, hs = _unlock(nd, last, r, ev, ht[r], hn[r], hs, clock - 1)
        g[G_CLOCK] = clock
        g[G_NODES] = n_nodes
        rq[r, RQ_HSIZE] = hs
        rq[r, RQ_AVAIL] = avail + held - key_n
        rq[r, RQ_EVICT] = ev
        rq[r, RQ_VER] += 1
    else:
        ev, hs = _unlock(nd, RI[i, r_node], r, rq[r, RQ_EVICT], ht[r], hn[r],
                         rq[r, RQ_HSIZE], -1)
        rq[r, RQ_HSIZE] = hs
        rq[r, RQ_EVICT] = ev
        rq[r, RQ_AVAIL] += held - RI[i, r_prot]
    RI[i, r_node] = EMPTY
    RI[i, r_prot] = 0
    _sync(S, Q, r)


def _unused() -> tuple[int, ...]:
    return (ES, EL)

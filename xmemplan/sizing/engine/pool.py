"""One KV block pool per replica, shared by running requests and cached prefixes (numba).

The pool is vLLM V1's `BlockPool` as a set of flat arrays (SGLang's radix cache at page
granularity keeps the same order, see docs/size.md "The simulator"):

- every block has a key (the hash of its tokens and of every block before it, -1 when it
  holds nothing reusable) and a reference count (requests holding it);
- blocks held by no request sit in one free queue per replica, least recently freed first.
  A request frees its blocks in reverse order (its last block first), so the tail of a
  prefix goes before its head (vLLM `KVCacheManager.free`; SGLang evicts radix leaves by
  last access, which is the same order for chains);
- a free block keeps its key, so a later request that asks for it gets a hit, until an
  allocation takes it from the head of the queue (the key is then dropped: eviction);
- blocks never used yet are only counted (they come first in vLLM's initial queue);
- a map (replica, key) -> block finds cached blocks (open addressing, linear probing,
  deletion by backward shift).

`xmemplan.sizing.engine.reference.PoolRef` is the same pool in plain Python (dicts and a
list); tests/test_engine.py drives both with the same operations (Hypothesis).
"""

from __future__ import annotations

import numpy as np
from numba import njit

NONE = -1
OFF = -2  # a block not in the free queue (held by a request)


@njit(cache=True)
def _hslot(key, r, mask):  # noqa: ANN001, ANN202
    h = (key * np.int64(0x9E3779B1) + r * np.int64(0x85EBCA77)) & np.int64(0x7FFFFFFFFFFF)
    h ^= h >> 17
    return h & mask


@njit(cache=True)
def pool_new(R: int, nb: int, arena: int) -> tuple:  # type: ignore[type-arg,unused-ignore]
    """Arrays of R replicas' pools of `nb` blocks each. The free queue starts with every
    block in id order (vLLM), so allocations take never-used blocks until none is left,
    and only then the queue's head: never-used blocks are counted (`virgin`), not stored,
    and get ids from one arena of `arena` blocks (at most the blocks the run can hold)."""
    bkey = np.full(arena, NONE, np.int64)
    bref = np.zeros(arena, np.int64)
    fprev = np.full(arena, OFF, np.int64)
    fnext = np.full(arena, OFF, np.int64)
    fhead = np.full(R, NONE, np.int64)
    ftail = np.full(R, NONE, np.int64)
    nfree = np.full(R, nb, np.int64)
    H = 16
    while 2 * arena + 16 > H:
        H *= 2
    hkey = np.full(H, NONE, np.int64)
    hrep = np.full(H, NONE, np.int64)
    hblk = np.full(H, NONE, np.int64)
    virgin = np.full(R, nb, np.int64)
    ctr = np.zeros(1, np.int64)
    return bkey, bref, fprev, fnext, fhead, ftail, nfree, hkey, hrep, hblk, virgin, ctr


@njit(cache=True, inline="always")
def _fq_append(fprev, fnext, fhead, ftail, nfree, r, b):  # noqa: ANN001, ANN202
    t = ftail[r]
    fprev[b] = t
    fnext[b] = NONE
    if t >= 0:
        fnext[t] = b
    else:
        fhead[r] = b
    ftail[r] = b
    nfree[r] += 1


@njit(cache=True, inline="always")
def _fq_remove(fprev, fnext, fhead, ftail, nfree, r, b):  # noqa: ANN001, ANN202
    p = fprev[b]
    n = fnext[b]
    if p >= 0:
        fnext[p] = n
    else:
        fhead[r] = n
    if n >= 0:
        fprev[n] = p
    else:
        ftail[r] = p
    fprev[b] = OFF
    fnext[b] = OFF
    nfree[r] -= 1


@njit(cache=True)
def h_find(hkey, hrep, hblk, r, key):  # noqa: ANN001, ANN201
    """The block of replica r cached under `key`, or -1."""
    mask = hkey.shape[0] - 1
    s = _hslot(key, r, mask)
    while hblk[s] >= 0:
        if hkey[s] == key and hrep[s] == r:
            return hblk[s]
        s = (s + 1) & mask
    return NONE


@njit(cache=True)
def h_insert(hkey, hrep, hblk, r, key, b):  # noqa: ANN001, ANN201
    """Map (r, key) -> b unless the key is cached already (then the first block keeps it,
    and b is found by nobody: vLLM keeps both, the first one is the one a lookup returns).
    Returns True when inserted."""
    mask = hkey.shape[0] - 1
    s = _hslot(key, r, mask)
    while hblk[s] >= 0:
        if hkey[s] == key and hrep[s] == r:
            return False
        s = (s + 1) & mask
    hkey[s] = key
    hrep[s] = r
    hblk[s] = b
    return True


@njit(cache=True)
def h_delete(hkey, hrep, hblk, r, key, b):  # noqa: ANN001, ANN201
    """Drop (r, key) if it maps to block b (backward-shift deletion)."""
    mask = hkey.shape[0] - 1
    s = _hslot(key, r, mask)
    while hblk[s] >= 0:
        if hkey[s] == key and hrep[s] == r:
            break
        s = (s + 1) & mask
    if hblk[s] < 0 or hblk[s] != b:
        return False
    hblk[s] = NONE
    j = s
    while True:
        j = (j + 1) & mask
        if hblk[j] < 0:
            break
        home = _hslot(hkey[j], hrep[j], mask)
        # move j back to s if its home is not in (s, j] cyclically
        if (j > s and (home <= s or home > j)) or (j < s and (home <= s and home > j)):
            hkey[s] = hkey[j]
            hrep[s] = hrep[j]
            hblk[s] = hblk[j]
            hblk[j] = NONE
            s = j
    return True


@njit(cache=True)
def pool_match(P, r, keys, k0, nmax):  # noqa: ANN001, ANN201
    """How many of keys[k0:k0+nmax] replica r has cached, consecutively from the first."""
    hkey, hrep, hblk = P[7], P[8], P[9]
    n = 0
    while n < nmax:
        if h_find(hkey, hrep, hblk, r, keys[k0 + n]) < 0:
            break
        n += 1
    return n


@njit(cache=True)
def pool_evictable(P, r, keys, k0, n):  # noqa: ANN001, ANN201
    """Of the first n cached keys, the blocks no request holds (they sit in the free queue,
    so taking them as hits leaves fewer free blocks to allocate)."""
    hkey, hrep, hblk, bref = P[7], P[8], P[9], P[1]
    c = 0
    for j in range(n):
        b = h_find(hkey, hrep, hblk, r, keys[k0 + j])
        if bref[b] == 0:
            c += 1
    return c


@njit(cache=True)
def pool_touch(P, r, keys, k0, n, rb, rb0, held):  # noqa: ANN001, ANN201
    """A request takes the first n cached keys as hits: their blocks join its table
    rb[rb0 + held:] (reference +1; out of the free queue if it was free). Returns held."""
    bkey, bref, fprev, fnext, fhead, ftail, nfree, hkey, hrep, hblk = P[:10]
    for j in range(n):
        b = h_find(hkey, hrep, hblk, r, keys[k0 + j])
        if bref[b] == 0:
            _fq_remove(fprev, fnext, fhead, ftail, nfree, r, b)
        bref[b] += 1
        rb[rb0 + held] = b
        held += 1
    return held


@njit(cache=True)
def pool_alloc(P, r, n, rb, rb0, held):  # noqa: ANN001, ANN201
    """n new blocks from the head of replica r's free queue (a cached one loses its key:
    evicted). The caller checked nfree[r] >= n. Returns held."""
    bkey, bref, fprev, fnext, fhead, ftail, nfree, hkey, hrep, hblk = P[:10]
    virgin, ctr = P[10], P[11]
    for _ in range(n):
        if virgin[r] > 0:
            virgin[r] -= 1
            nfree[r] -= 1
            b = ctr[0]
            ctr[0] += 1
        else:
            b = fhead[r]
            _fq_remove(fprev, fnext, fhead, ftail, nfree, r, b)
        if bkey[b] >= 0:
            h_delete(hkey, hrep, hblk, r, bkey[b], b)
            bkey[b] = NONE
        bref[b] = 1
        rb[rb0 + held] = b
        held += 1
    return held


@njit(cache=True)
def pool_cache(P, r, b, key):  # noqa: ANN001, ANN201
    """Block b now holds the tokens of `key` (a full block computed): findable."""
    bkey, hkey, hrep, hblk = P[0], P[7], P[8], P[9]
    if bkey[b] >= 0:
        return
    bkey[b] = key
    if not h_insert(hkey, hrep, hblk, r, key, b):
        bkey[b] = NONE  # a duplicate: nobody finds it, it is freed as an empty block


@njit(cache=True)
def pool_free(P, r, rb, rb0, held):  # noqa: ANN001, ANN201
    """A request lets go of its `held` blocks, last block first; a block no request holds
    any more goes to the tail of the free queue, keeping its key."""
    bref, fprev, fnext, fhead, ftail, nfree = P[1], P[2], P[3], P[4], P[5], P[6]
    for j in range(held - 1, -1, -1):
        b = rb[rb0 + j]
        bref[b] -= 1
        if bref[b] == 0:
            _fq_append(fprev, fnext, fhead, ftail, nfree, r, b)

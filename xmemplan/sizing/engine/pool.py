"""One KV block pool per replica, shared by running requests and cached prefixes (numba).

The pool is vLLM V1's `BlockPool` as a set of flat arrays (SGLang's radix cache at page
granularity keeps the same order, see docs/size.md "The simulator"):

- every block has a key (the hash of its tokens and of every block before it, -1 when it
  holds nothing reusable) and a reference count (requests holding it);
- blocks held by no request sit in one free queue per replica, least recently freed first.
  A request frees its blocks in reverse order (its last block first), so the tail of a
  prefix goes before its head (vLLM `KVCacheManager.free`; SGLang evicts radix leaves by
  last access, which is the same order for chains);
- a freed block with no key (partial: nothing can hit it) goes to the queue's front,
  reused first (vLLM `BlockPool.free_blocks`);
- a free block keeps its key, so a later request that asks for it gets a hit, until an
  allocation takes it from the head of the queue (the key is then dropped: eviction);
- blocks never used yet are only counted (they come first in vLLM's initial queue);
- a map (replica, key) -> block finds cached blocks (open addressing, linear probing,
  deletion by backward shift). A key cached twice (the same prefix computed or loaded
  twice at once) keeps both blocks, the first one found, the others chained behind it in
  the order they were cached; when the found one is evicted the next one is found (vLLM
  `BlockHashToBlockMap`: a hash maps to a dict of blocks, `get_one_block` the first).

`xmemplan.sizing.engine.reference.PoolRef` is the same pool in plain Python (dicts and a
list); tests/test_engine.py drives both with the same operations (Hypothesis).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from xmemplan.prefix.kernels import no_runtime

NONE = -1
OFF = -2  # a block not in the free queue (held by a request)
# B[b, .] per block; Q[r, .] per replica; H[s, .] per map slot
B_KEY, B_REF, B_PREV, B_NEXT, B_DUP = range(5)  # B_DUP: the next block of the same key
Q_HEAD, Q_TAIL, Q_NFREE, Q_VIRGIN, Q_NFRONT = range(5)
H_KEY, H_REP, H_BLK = range(3)
# (numba passes every array argument with a reference count: the pool is three 2-D arrays
# and a counter, and the per-block loops below are written out, not calls, to stay cheap)


@njit(cache=True)
def _hslot(key, r, mask):  # noqa: ANN001, ANN202
    h = (key * np.int64(0x9E3779B1) + r * np.int64(0x85EBCA77)) & np.int64(0x7FFFFFFFFFFF)
    h ^= h >> 17
    return h & mask


@njit(cache=True)
def pool_new(R: int, nb: int, arena: int, mapped: int) -> tuple:  # type: ignore[type-arg,unused-ignore]
    """R replicas' pools of `nb` blocks each. The free queue starts with every block in id
    order (vLLM), so allocations take never-used blocks until none is left, and only then
    the queue's head: never-used blocks are counted (Q_VIRGIN), not stored, and get ids
    from one arena of `arena` blocks (at most the blocks the run can hold); the map has
    room for `mapped` cached blocks (at most those of requests whose blocks are asked for).
    """
    B = np.empty((arena, 5), np.int64)
    for b in range(arena):
        B[b, B_KEY] = NONE
        B[b, B_REF] = 0
        B[b, B_PREV] = OFF
        B[b, B_NEXT] = OFF
        B[b, B_DUP] = NONE
    Q = np.empty((R, 5), np.int64)
    for r in range(R):
        Q[r, Q_HEAD] = NONE
        Q[r, Q_TAIL] = NONE
        Q[r, Q_NFREE] = nb
        Q[r, Q_VIRGIN] = nb
        Q[r, Q_NFRONT] = 0  # queued blocks ahead of the never-used ones (prepended)
    hs = 16
    while 2 * mapped + 16 > hs:
        hs *= 2
    H = np.full((hs, 3), NONE, np.int64)
    ctr = np.zeros(1, np.int64)
    return B, Q, H, ctr


@no_runtime
def pool_nfree(P, r):  # noqa: ANN001, ANN201
    """Blocks of replica r no request holds (never used, or free and maybe cached)."""
    return P[1][r, Q_NFREE]


@no_runtime
def h_find(H, r, key):  # noqa: ANN001, ANN201
    """The block of replica r cached under `key`, or -1."""
    mask = H.shape[0] - 1
    s = _hslot(key, r, mask)
    while H[s, H_BLK] >= 0:
        if H[s, H_KEY] == key and H[s, H_REP] == r:
            return H[s, H_BLK]
        s = (s + 1) & mask
    return NONE


@no_runtime
def h_insert(H, r, key, b):  # noqa: ANN001, ANN201
    """Map (r, key) -> b unless the key is cached already (then the first block keeps it,
    and b is found by nobody: vLLM keeps both, the first one is the one a lookup returns).
    Returns True when inserted."""
    mask = H.shape[0] - 1
    s = _hslot(key, r, mask)
    while H[s, H_BLK] >= 0:
        if H[s, H_KEY] == key and H[s, H_REP] == r:
            return False
        s = (s + 1) & mask
    H[s, H_KEY] = key
    H[s, H_REP] = r
    H[s, H_BLK] = b
    return True


@no_runtime
def h_delete(H, r, key, b, nxt):  # noqa: ANN001, ANN201
    """Drop (r, key) if it maps to block b (backward-shift deletion); when `nxt` >= 0 (the
    key's next block) it maps to that one instead."""
    mask = H.shape[0] - 1
    s = _hslot(key, r, mask)
    while H[s, H_BLK] >= 0:
        if H[s, H_KEY] == key and H[s, H_REP] == r:
            break
        s = (s + 1) & mask
    if H[s, H_BLK] < 0 or H[s, H_BLK] != b:
        return False
    if nxt >= 0:
        H[s, H_BLK] = nxt
        return True
    H[s, H_BLK] = NONE
    j = s
    while True:
        j = (j + 1) & mask
        if H[j, H_BLK] < 0:
            break
        home = _hslot(H[j, H_KEY], H[j, H_REP], mask)
        # move j back to s if its home is not in (s, j] cyclically
        if (j > s and (home <= s or home > j)) or (j < s and (home <= s and home > j)):
            H[s, H_KEY] = H[j, H_KEY]
            H[s, H_REP] = H[j, H_REP]
            H[s, H_BLK] = H[j, H_BLK]
            H[j, H_BLK] = NONE
            s = j
    return True


@no_runtime
def pool_match(P, r, keys, k0, nmax):  # noqa: ANN001, ANN201
    """How many of keys[k0:k0+nmax] replica r has cached, consecutively from the first."""
    H = P[2]
    mask = H.shape[0] - 1
    n = 0
    while n < nmax:
        key = keys[k0 + n]
        s = _hslot(key, r, mask)
        found = False
        while H[s, H_BLK] >= 0:
            if H[s, H_KEY] == key and H[s, H_REP] == r:
                found = True
                break
            s = (s + 1) & mask
        if not found:
            break
        n += 1
    return n


# --- intrusive doubly linked lists -----------------------------------------------------------
# Rows of X carry (PREV, NEXT) columns; row r of L carries the list's (HEAD, TAIL). The pool's
# free queue and the policies' waiting and running lists are all this one list.
@njit(cache=True, inline="always")
def dl_append(X, L, r, i, PREV, NEXT, HEAD, TAIL):  # noqa: ANN001, ANN201
    t = L[r, TAIL]
    X[i, PREV] = t
    X[i, NEXT] = NONE
    if t >= 0:
        X[t, NEXT] = i
    else:
        L[r, HEAD] = i
    L[r, TAIL] = i


@njit(cache=True, inline="always")
def dl_prepend(X, L, r, i, PREV, NEXT, HEAD, TAIL):  # noqa: ANN001, ANN201
    dl_append(X, L, r, i, NEXT, PREV, TAIL, HEAD)  # the same list read backwards


@njit(cache=True, inline="always")
def dl_insert_after(X, L, r, x, i, PREV, NEXT, HEAD, TAIL):  # noqa: ANN001, ANN201
    """Row i into list r after row x (at the head when x is NONE)."""
    if x < 0:
        dl_prepend(X, L, r, i, PREV, NEXT, HEAD, TAIL)
        return
    n = X[x, NEXT]
    X[i, PREV] = x
    X[i, NEXT] = n
    X[x, NEXT] = i
    if n >= 0:
        X[n, PREV] = i
    else:
        L[r, TAIL] = i


@njit(cache=True, inline="always")
def dl_remove(X, L, r, i, PREV, NEXT, HEAD, TAIL):  # noqa: ANN001, ANN201
    p, n = X[i, PREV], X[i, NEXT]
    if p >= 0:
        X[p, NEXT] = n
    else:
        L[r, HEAD] = n
    if n >= 0:
        X[n, PREV] = p
    else:
        L[r, TAIL] = p


@no_runtime
def pool_evictable(P, r, keys, k0, n):  # noqa: ANN001, ANN201
    """Of the first n cached keys, the blocks no request holds (they sit in the free queue,
    so taking them as hits leaves fewer free blocks to allocate)."""
    B, H = P[0], P[2]
    c = 0
    for j in range(n):
        b = h_find(H, r, keys[k0 + j])
        if B[b, B_REF] == 0:
            c += 1
    return c


@no_runtime
def pool_touch(P, r, keys, k0, n, rb, rb0, held):  # noqa: ANN001, ANN201
    """A request takes the first n cached keys as hits: their blocks join its table
    rb[rb0 + held:] (reference +1; out of the free queue if it was free). Returns held."""
    B, Q, H = P[0], P[1], P[2]
    for j in range(n):
        b = h_find(H, r, keys[k0 + j])
        if B[b, B_REF] == 0:
            dl_remove(B, Q, r, b, B_PREV, B_NEXT, Q_HEAD, Q_TAIL)
            B[b, B_PREV] = OFF
            B[b, B_NEXT] = OFF
            Q[r, Q_NFREE] -= 1
        B[b, B_REF] += 1
        rb[rb0 + held] = b
        held += 1
    return held


@njit(cache=True, inline="always")
def _uncache(B, H, r, b):  # noqa: ANN001, ANN202
    """Block b loses its key (evicted): the key's next block is found instead, or (b a
    later copy) b leaves the key's chain."""
    key = B[b, B_KEY]
    if not h_delete(H, r, key, b, B[b, B_DUP]):
        x = h_find(H, r, key)
        while x >= 0 and B[x, B_DUP] != b:
            x = B[x, B_DUP]
        if x >= 0:
            B[x, B_DUP] = B[b, B_DUP]
    B[b, B_DUP] = NONE
    B[b, B_KEY] = NONE


@no_runtime
def pool_alloc(P, r, n, rb, rb0, held):  # noqa: ANN001, ANN201
    """n new blocks: never-used ones first, then from the head of replica r's free queue
    (a cached one loses its key: evicted). The caller checked nfree >= n. Returns held."""
    B, Q, H, ctr = P
    for _ in range(n):
        if Q[r, Q_VIRGIN] > 0 and Q[r, Q_NFRONT] == 0:
            Q[r, Q_VIRGIN] -= 1
            b = ctr[0]
            ctr[0] += 1
        else:
            if Q[r, Q_NFRONT] > 0:
                Q[r, Q_NFRONT] -= 1
            b = Q[r, Q_HEAD]
            nx = B[b, B_NEXT]
            Q[r, Q_HEAD] = nx
            if nx >= 0:
                B[nx, B_PREV] = NONE
            else:
                Q[r, Q_TAIL] = NONE
            B[b, B_PREV] = OFF
            B[b, B_NEXT] = OFF
            if B[b, B_KEY] >= 0:
                _uncache(B, H, r, b)
        Q[r, Q_NFREE] -= 1
        B[b, B_REF] = 1
        rb[rb0 + held] = b
        held += 1
    return held


@no_runtime
def pool_cache(P, r, b, key):  # noqa: ANN001, ANN201
    """Block b now holds the tokens of `key` (a full block computed): findable."""
    B, H = P[0], P[2]
    if B[b, B_KEY] >= 0:
        return
    if not h_insert(H, r, key, b):
        # a duplicate (the key is cached already: the first block stays the one found)
        # keeps its key too, chained last: vLLM's BlockHashToBlockMap.insert holds both
        # blocks under the hash, so when freed it goes to the free queue's tail as a
        # cached block (BlockPool.free_blocks), and it is found once the first is evicted
        x = h_find(H, r, key)
        while B[x, B_DUP] >= 0:
            x = B[x, B_DUP]
        B[x, B_DUP] = b
    B[b, B_KEY] = key


@no_runtime
def pool_free(P, r, rb, rb0, held):  # noqa: ANN001, ANN201
    """A request lets go of its `held` blocks, last block first; a block no request holds
    any more goes to the tail of the free queue keeping its key (LRU), or, holding no key
    (a partial block: nothing can hit it), to the front, in the same order, reused first
    (vLLM BlockPool.free_blocks: prepend_n of uncached blocks, append_n of cached)."""
    B, Q = P[0], P[1]
    ins = NONE  # the last block put at the front
    for j in range(held - 1, -1, -1):
        b = rb[rb0 + j]
        B[b, B_REF] -= 1
        if B[b, B_REF] != 0:
            continue
        Q[r, Q_NFREE] += 1
        if B[b, B_KEY] < 0:
            nx = Q[r, Q_HEAD] if ins < 0 else B[ins, B_NEXT]
            B[b, B_PREV] = ins
            B[b, B_NEXT] = nx
            if ins >= 0:
                B[ins, B_NEXT] = b
            else:
                Q[r, Q_HEAD] = b
            if nx >= 0:
                B[nx, B_PREV] = b
            else:
                Q[r, Q_TAIL] = b
            ins = b
            if Q[r, Q_VIRGIN] > 0:
                Q[r, Q_NFRONT] += 1
        else:
            t = Q[r, Q_TAIL]
            B[b, B_PREV] = t
            B[b, B_NEXT] = NONE
            if t >= 0:
                B[t, B_NEXT] = b
            else:
                Q[r, Q_HEAD] = b
            Q[r, Q_TAIL] = b


@njit(cache=True)
def synth_keys(prompt, output, src, shared, bs):  # noqa: ANN001, ANN201
    """Block keys of requests known only by lengths: request i's first shared[i] tokens are
    the tokens of request src[i] (an earlier one: the previous turn of its conversation,
    whose prompt and output it extends), the rest its own. Returns (keys, koff, kn)."""
    n = prompt.shape[0]
    kn = np.zeros(n, np.int64)
    koff = np.zeros(n, np.int64)
    tot = 0
    for i in range(n):
        koff[i] = tot
        kn[i] = (prompt[i] + output[i]) // bs
        tot += kn[i]
    keys = np.empty(max(tot, 1), np.int64)
    fresh = 0
    for i in range(n):
        s = src[i]
        m = 0
        if s >= 0:
            m = shared[i] // bs
            if m > kn[s]:
                m = kn[s]
            if m > kn[i]:
                m = kn[i]
            for j in range(m):
                keys[koff[i] + j] = keys[koff[s] + j]
        for j in range(m, kn[i]):
            keys[koff[i] + j] = fresh
            fresh += 1
    return keys, koff, kn

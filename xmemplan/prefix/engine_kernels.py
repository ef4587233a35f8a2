"""numba kernels of the engines' finite caches: vLLM's block pool, SGLang's radix cache.

Kernels take only arrays and scalars; `xmemplan.prefix.engine_cache` is the driver and
`xmemplan.prefix.engine_reference` the readable reference they are tested against (its
docstring has the replay rules). One call replays one capacity: neither engine's cache is a
stack algorithm (vLLM allocates a request's blocks before it frees the previous one's,
SGLang evicts whole leaves and keeps spare room), so a curve is one replay per point.

Input per request r: `ids[offsets[r]:offsets[r+1]]` holds one id per full page of its KV
(`kv_page_ids`: equal ids mean equal prefixes; a page holding an output token has an id of
its own), `prompt[r]` = L, `kv[r]` = K.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from xmemplan.prefix.kernels import (
    _add_child,
    _common,
    _find_child,
    _set_child,
    _slot,
    no_runtime,
)

EMPTY = -1
NEVER = -2  # vLLM: the page id of a full block no prompt can ask for (output, no key):
#   hashed (freed to the tail) but in no chain, as a unique id of its own would be

# The two replay kernels run without numba's runtime (`kernels.no_runtime`): they allocate
# nothing (every table is the caller's), and the runtime's reference counts of the arrays
# the inlined helpers bind cost the SGLang kernel a third of its time (Mooncake: 6.2 ->
# 4.2 ms a replay; docs/performance.md, round 6).


@njit(cache=True)
def kv_page_ids(
    keys: np.ndarray, offsets: np.ndarray, have: np.ndarray, out_off: np.ndarray,
    resets: np.ndarray, canon: np.ndarray, e_start: np.ndarray, e_out: np.ndarray,
    e_len: np.ndarray, t_node: np.ndarray, t_key: np.ndarray, t_child: np.ndarray,
    t_epoch: np.ndarray,
) -> None:
    """One id per full page of each request's KV, laid out by `out_off`.

    The first have[r] pages of request r are its keys; page i gets the position (in the KV
    layout) where the same prefix of i + 1 pages first appeared, so equal ids mean equal
    prefixes, as the engines' chained block hashes do. Every later page (it holds an output
    token, or the trace has no key for it) gets its own position: it can never hit.

    The radix tree of `kernels.match_insert` over the keys (edges are slices of the input:
    an edge's start is the first appearance of its pages); a page costs a sequential
    compare, not a hash probe. `e_out` is an edge's start in the KV layout.
    """
    mask = np.int64(t_node.shape[0] - 1)
    epoch = np.int64(-1)
    n_nodes = np.int64(1)
    for r in range(offsets.shape[0] - 1):
        if resets[r] or r == 0:
            epoch += 1
            n_nodes = np.int64(1)
        s = offsets[r]
        o = out_off[r]
        n = have[r]
        node = np.int64(0)
        pos = np.int64(0)
        split_child = np.int64(EMPTY)
        split_at = np.int64(0)
        while pos < n:
            k = keys[s + pos]
            child = _find_child(t_node, t_key, t_child, t_epoch, epoch, node, k, mask)
            if child == EMPTY:
                break
            length = e_len[child]
            lim = min(length, n - pos)
            m = _common(keys, e_start[child], keys, s + pos, lim)
            e0 = e_out[child]
            for i in range(m):
                canon[o + pos + i] = e0 + i
            pos += m
            if m < length:
                if m < lim:
                    split_child = child
                    split_at = m
                break
            node = child
        for i in range(o + pos, out_off[r + 1]):
            canon[i] = i
        if pos == n:
            continue
        if split_child != EMPTY:
            c = split_child
            mid = n_nodes
            n_nodes += 1
            e_start[mid] = e_start[c]
            e_out[mid] = e_out[c]
            e_len[mid] = split_at
            _set_child(t_node, t_key, t_child, t_epoch, epoch, node, keys[e_start[c]], mid, mask)
            e_start[c] += split_at
            e_out[c] += split_at
            e_len[c] -= split_at
            _add_child(t_node, t_key, t_child, t_epoch, epoch, mid, keys[e_start[c]], c, mask)
            node = mid
        leaf = n_nodes
        n_nodes += 1
        e_start[leaf] = s + pos
        e_out[leaf] = o + pos
        e_len[leaf] = n - pos
        _add_child(t_node, t_key, t_child, t_epoch, epoch, node, keys[s + pos], leaf, mask)


# --- vLLM ------------------------------------------------------------------------------------


# One row per block (blk) and per page id (pg), so that one block's or one page's fields
# share a cache line: the replay is a walk over random blocks, bound by memory latency.
NXT, PRV, REF, KEY, DN, DP, MK = 0, 1, 2, 3, 4, 5, 6  # blk columns (sentinel rows: NXT,
#   PRV only); MK: 2r + 1 while request r is about to hit the block, 2r + 2 once a release
#   before r handed it over
FIRST, LAST, EPOCH = 0, 1, 2  # pg columns


@njit(cache=True, inline="always")
def _q_unlink(blk: np.ndarray, b: int) -> None:
    nb = blk[b, NXT]
    pb = blk[b, PRV]
    blk[pb, NXT] = nb
    blk[nb, PRV] = pb


@njit(cache=True, inline="always")
def _q_after(blk: np.ndarray, at: int, b: int) -> None:
    """Link b right after `at`."""
    nb = blk[at, NXT]
    blk[at, NXT] = b
    blk[b, PRV] = at
    blk[b, NXT] = nb
    blk[nb, PRV] = b


@no_runtime
def vllm_replay(
    canon: np.ndarray,  # int64: page ids (kv_page_ids), one per full page of the KV
    offsets: np.ndarray,  # int64, n + 1
    resets: np.ndarray,  # bool, n: a new, empty pool before request r
    prompt: np.ndarray,  # int64, n: L
    kv: np.ndarray,  # int64, n: K
    page: int,
    n_blocks: int,  # blocks of the pool (capacity // page)
    inflight: int,
    epoch0: int,  # first epoch (pg rows stamped below it are empty: no clearing per call)
    out_hit: np.ndarray,  # int64, n: hit tokens
    out_rejected: np.ndarray,  # bool, n
    blk: np.ndarray,  # int64, (B + 3) x 8 (B = the most blocks ever used; 3 sentinel rows)
    pg: np.ndarray,  # int64, pages x 4: FIRST / LAST block of the page id, EPOCH (< epoch0: empty)
    held: np.ndarray,  # int64, inflight x (most pages of one request)
    held_n: np.ndarray,  # int64, inflight
    held_r: np.ndarray,  # int64, inflight
    tmp: np.ndarray,  # int64, most pages of one request
    hits: np.ndarray,  # int64, most pages of one request: the blocks request r hits
) -> None:
    """vLLM's BlockPool: the free-block queue (a doubly linked list through blk), block
    hashes as page ids, several blocks per id in insertion order (DN / DP links)."""
    cap_b = blk.shape[0] - 3
    head = cap_b  # sentinels: head, tail, and FRESH (the blocks never used yet, as one run)
    tail = cap_b + 1
    fresh_node = cap_b + 2
    epoch = np.int64(epoch0 - 1)
    fresh = np.int64(0)  # blocks never used, still in the FRESH run
    next_id = np.int64(0)
    nfree = np.int64(0)
    q0 = 0  # ring of in-flight requests: first slot, count
    qn = 0
    for r in range(offsets.shape[0] - 1):
        if resets[r] or r == 0:
            epoch += 1
            q0 = 0
            qn = 0
            blk[head, NXT] = fresh_node
            blk[fresh_node, PRV] = head
            blk[fresh_node, NXT] = tail
            blk[tail, PRV] = fresh_node
            fresh = np.int64(n_blocks)
            next_id = 0
            nfree = np.int64(n_blocks)
        s = offsets[r]
        L = prompt[r]
        K = kv[r]
        need = (K + page - 1) // page
        out_hit[r] = 0
        out_rejected[r] = False
        if need > n_blocks or L <= 0:
            out_rejected[r] = True
            continue
        # r's hits first (the releases below change no page id's blocks): leading cached
        # full blocks, at most (L - 1) // page
        lim = (L - 1) // page
        nh = 0
        for j in range(lim):
            k = canon[s + j]
            if k < 0 or pg[k, EPOCH] != epoch:
                break
            b = pg[k, FIRST]
            if b == EMPTY:
                break
            blk[b, MK] = 2 * r + 1
            hits[nh] = b
            nh += 1
        # release the oldest in-flight requests until r fits (and fewer than k run). A
        # released block r hits is handed over: freeing it (to the queue's tail) and
        # touching it (out of the queue) again leave the queue and counts as they were,
        # but the first release of it counts as freeing it (`handed`) while r waits
        handed = np.int64(0)
        while qn > 0 and (qn >= inflight or nfree + handed < need):
            q = q0
            nf = 0
            for j in range(held_n[q] - 1, -1, -1):  # tail first
                b = held[q, j]
                if blk[b, MK] == 2 * r + 1:
                    blk[b, MK] = 2 * r + 2
                    if blk[b, REF] == 1:
                        handed += 1
                    continue
                blk[b, REF] -= 1
                if blk[b, REF] == 1 and blk[b, MK] == 2 * r + 2:
                    handed += 1  # its last other holder: free until r touches it
                elif blk[b, REF] == 0:
                    if blk[b, KEY] == EMPTY:
                        tmp[nf] = b
                        nf += 1
                    else:
                        _q_after(blk, blk[tail, PRV], b)
                    nfree += 1
            for j in range(nf - 1, -1, -1):  # the unhashed ones go to the front, in order
                _q_after(blk, head, tmp[j])
            q0 = (q0 + 1) % inflight
            qn -= 1
        slot_q = (q0 + qn) % inflight
        qn += 1
        held_r[slot_q] = r
        for j in range(nh):
            b = hits[j]
            held[slot_q, j] = b
            if blk[b, MK] == 2 * r + 2:  # handed over: held as it was
                continue
            if blk[b, REF] == 0:  # touch
                _q_unlink(blk, b)
                nfree -= 1
            blk[b, REF] += 1
        out_hit[r] = nh * page
        # new blocks for the rest of the prefill and every decode step, from the front
        for j in range(nh, need):
            f = blk[head, NXT]
            if f == fresh_node:
                b = next_id
                next_id += 1
                fresh -= 1
                if fresh == 0:
                    _q_unlink(blk, fresh_node)
                blk[b, KEY] = EMPTY
                blk[b, MK] = EMPTY
            else:
                b = f
                _q_unlink(blk, b)
                k = blk[b, KEY]
                if k >= 0:  # the block leaves the cache now
                    dp = blk[b, DP]
                    dn = blk[b, DN]
                    if dp == EMPTY:
                        pg[k, FIRST] = dn
                    else:
                        blk[dp, DN] = dn
                    if dn == EMPTY:
                        pg[k, LAST] = dp
                    else:
                        blk[dn, DP] = dp
                blk[b, KEY] = EMPTY
            nfree -= 1
            blk[b, REF] = 1
            held[slot_q, j] = b
        held_n[slot_q] = need
        # full blocks are cached: the prompt's, then those that decode fills
        for j in range(nh, K // page):
            b = held[slot_q, j]
            k = canon[s + j]
            if k < 0:  # NEVER: hashed, asked for by no prompt
                blk[b, KEY] = NEVER
                continue
            if pg[k, EPOCH] != epoch:
                pg[k, EPOCH] = epoch
                pg[k, FIRST] = EMPTY
                pg[k, LAST] = EMPTY
            last = pg[k, LAST]
            blk[b, DP] = last
            blk[b, DN] = EMPTY
            if last == EMPTY:
                pg[k, FIRST] = b
            else:
                blk[last, DN] = b
            pg[k, LAST] = b
            blk[b, KEY] = k
        if r + 1 == offsets.shape[0] - 1 or resets[r + 1]:
            qn = 0  # the pool ends with this universe: no release can change a hit


# --- SGLang ----------------------------------------------------------------------------------

ES, EL, PA, LK, ST, NC, AL = 0, 1, 2, 3, 4, 5, 6  # nd columns: one row per tree node
TN, TK, TC, TE = 0, 1, 2, 3  # tb columns: one row per slot of the child table


@njit(cache=True, inline="always")
def _heap_push(h_time: np.ndarray, h_node: np.ndarray, size: int, t: int, x: int) -> int:
    i = size
    h_time[i] = t
    h_node[i] = x
    while i > 0:
        p = (i - 1) >> 1
        if h_time[p] < h_time[i] or (h_time[p] == h_time[i] and h_node[p] <= h_node[i]):
            break
        h_time[p], h_time[i] = h_time[i], h_time[p]
        h_node[p], h_node[i] = h_node[i], h_node[p]
        i = p
    return size + 1


@njit(cache=True, inline="always")
def _heap_pop(h_time: np.ndarray, h_node: np.ndarray, size: int) -> int:
    size -= 1
    h_time[0] = h_time[size]
    h_node[0] = h_node[size]
    i = 0
    while True:
        a = 2 * i + 1
        if a >= size:
            break
        b = a + 1
        c = a
        if b < size and (h_time[b] < h_time[a] or (h_time[b] == h_time[a]
                                                     and h_node[b] < h_node[a])):
            c = b
        if h_time[i] < h_time[c] or (h_time[i] == h_time[c] and h_node[i] <= h_node[c]):
            break
        h_time[c], h_time[i] = h_time[i], h_time[c]
        h_node[c], h_node[i] = h_node[i], h_node[c]
        i = c
    return size


@njit(cache=True, inline="always")
def _find(tb: np.ndarray, epoch: int, mask: int, node: int, k: int) -> tuple[int, int]:
    """Child table: (child of `node` by first key `k`, or EMPTY; the slot it ends at)."""
    sl = _slot(node, k, mask)
    while tb[sl, TE] == epoch:
        if tb[sl, TN] == node and tb[sl, TK] == k:
            return tb[sl, TC], sl
        sl = (sl + 1) & mask
    return EMPTY, sl


@njit(cache=True, inline="always")
def _split(nd: np.ndarray, tb: np.ndarray, epoch: int, mask: int, keys: np.ndarray,
           sl: int, child: int, m: int, mid: int) -> None:
    """Split `child` (found at slot `sl`) after its first `m` keys: new node `mid` holds
    them (one child, locks as `child`'s), `child` keeps the rest below it."""
    nd[mid, ES] = nd[child, ES]
    nd[mid, EL] = m
    nd[mid, PA] = nd[child, PA]
    nd[mid, LK] = nd[child, LK]
    nd[mid, NC] = 1
    nd[mid, AL] = 1
    tb[sl, TC] = mid
    nd[child, ES] += m
    nd[child, EL] -= m
    nd[child, PA] = mid
    _put(tb, epoch, mask, mid, keys[nd[child, ES]], child)


@njit(cache=True, inline="always")
def _put(tb: np.ndarray, epoch: int, mask: int, node: int, k: int, child: int) -> None:
    """Child table: (node, k) -> child, reusing the slot of an evicted (node, k) child."""
    sl = _slot(node, k, mask)
    while tb[sl, TE] == epoch and not (tb[sl, TN] == node and tb[sl, TK] == k):
        sl = (sl + 1) & mask
    tb[sl, TN] = node
    tb[sl, TK] = k
    tb[sl, TC] = child
    tb[sl, TE] = epoch


@njit(cache=True, inline="always")
def _match_len(ids: np.ndarray, a: int, b: int, lim: int) -> int:
    """Length of the common run of ids[a:] and ids[b:] (at most lim), by bisection: page
    ids name whole prefixes (kv_page_ids), so once two pages differ all later ones do."""
    if lim <= 0 or ids[a] != ids[b]:
        return 0
    if ids[a + lim - 1] == ids[b + lim - 1]:
        return lim
    lo = 1  # ids[a + lo - 1] equal
    hi = lim - 1  # ids[a + hi] differ
    while lo < hi:
        mid = (lo + hi + 1) >> 1
        if ids[a + mid - 1] == ids[b + mid - 1]:
            lo = mid
        else:
            hi = mid - 1
    return lo


@njit(cache=True, inline="always")
def _lock(nd: np.ndarray, node: int, root: int, evictable: int, stamp: int) -> int:
    """RadixCache.inc_lock_ref from `node` up to the root (`stamp` >= 0: the path's access
    time is set to it on the way). Returns the evictable pages."""
    x = node
    while x != root:
        if stamp >= 0:
            nd[x, ST] = stamp
        if nd[x, LK] == 0:
            evictable -= nd[x, EL]
        nd[x, LK] += 1
        x = nd[x, PA]
    return evictable


@njit(cache=True, inline="always")
def _unlock(nd: np.ndarray, node: int, root: int, evictable: int, h_time: np.ndarray,
            h_node: np.ndarray, hsize: int, stamp: int) -> tuple[int, int]:
    """RadixCache.dec_lock_ref: a node it unlocks that has no children becomes an
    evictable leaf (pushed). Returns (evictable pages, heap size)."""
    x = node
    while x != root:
        if stamp >= 0:
            nd[x, ST] = stamp
        nd[x, LK] -= 1
        if nd[x, LK] == 0:
            evictable += nd[x, EL]
            if nd[x, NC] == 0:
                hsize = _heap_push(h_time, h_node, hsize, nd[x, ST], x)
        x = nd[x, PA]
    return evictable, hsize


@njit(cache=True, inline="always")
def _evict(nd: np.ndarray, tb: np.ndarray, epoch: int, mask: int, keys: np.ndarray,
           h_time: np.ndarray, h_node: np.ndarray, hsize: int, goal: int, page: int,
           root: int) -> tuple[int, int]:
    """RadixCache.evict(goal tokens): whole unlocked leaves, least recently used first, until
    at least `goal` tokens are freed (a parent left without children joins the heap).
    Stale heap entries (the node was used, split, locked or evicted since) are skipped.
    Returns (pages freed, heap size)."""
    done = 0
    freed = 0
    while done < goal and hsize > 0:
        tx = h_time[0]
        xx = h_node[0]
        hsize = _heap_pop(h_time, h_node, hsize)
        if nd[xx, AL] == 0 or nd[xx, NC] != 0 or nd[xx, LK] != 0 or nd[xx, ST] != tx:
            continue
        freed += nd[xx, EL]
        done += nd[xx, EL] * page
        nd[xx, AL] = 0
        p = nd[xx, PA]
        k = keys[nd[xx, ES]]
        sl = _slot(p, k, mask)
        while not (tb[sl, TN] == p and tb[sl, TK] == k and tb[sl, TE] == epoch):
            sl = (sl + 1) & mask
        tb[sl, TC] = EMPTY
        nd[p, NC] -= 1
        if nd[p, NC] == 0 and nd[p, LK] == 0 and p != root:
            hsize = _heap_push(h_time, h_node, hsize, nd[p, ST], p)
    return freed, hsize


@njit(cache=True, inline="always")
def _walk(
    keys: np.ndarray, s: int, n_walk: int, nd: np.ndarray, tb: np.ndarray, epoch: int,
    mask: int, h_time: np.ndarray, h_node: np.ndarray,
    clock: int, n_nodes: int, hsize: int, root: int = 0,
) -> tuple[int, int, int, int, int]:
    """RadixCache._match_prefix_helper / the walk of _insert_helper (the same moves).

    Stamps the root and every node entered with one time; where the keys end or differ
    inside an edge, the edge is split: the new upper node gets the next time, the lower
    part keeps the path's. Returns (pages matched, last node, clock, nodes, heap size).
    `root`: the tree's root node (the engine simulator keeps one tree per replica).
    """
    t = clock
    clock += 1
    nd[root, ST] = t
    node = root
    pos = 0
    while pos < n_walk:
        k = keys[s + pos]
        child, sl = _find(tb, epoch, mask, node, k)
        if child == EMPTY:
            break
        nd[child, ST] = t
        length = nd[child, EL]
        m = _match_len(keys, nd[child, ES], s + pos, min(length, n_walk - pos))
        pos += m
        if m < length:
            # the part below the split stays an unlocked leaf if it was one: evictable at
            # t (a leaf matched whole ends the walk and is locked: its unlock pushes it)
            if nd[child, NC] == 0 and nd[child, LK] == 0:
                hsize = _heap_push(h_time, h_node, hsize, t, child)
            mid = n_nodes
            n_nodes += 1
            _split(nd, tb, epoch, mask, keys, sl, child, m, mid)
            nd[mid, ST] = clock
            clock += 1
            node = mid
            break
        node = child
    return pos, node, clock, n_nodes, hsize


@njit(cache=True, inline="always")
def _checkpoint(
    keys: np.ndarray, ss: int, key_n: int, prompt_n: int, old: int, protected: int,
    nd: np.ndarray, tb: np.ndarray, epoch: int, mask: int,
    h_time: np.ndarray, h_node: np.ndarray, clock: int, n_nodes: int, hsize: int,
    free_pages: int, evictable: int, path: np.ndarray, protected_pos: int,
    stamp_above: bool, root: int = 0,
) -> tuple[int, int, int, int, int, int]:
    """RadixCache.checkpoint in one walk: insert the first `key_n` pages of the KV, insert
    the prompt's again (split_prompt), free the duplicates past `protected` pages, look the
    key up again, move the lock from `old` to the new last node.

    The engine walks the path three times (insert t1, prompt insert t2, lookup t3); what is
    left of it is: every node of the path stamped t3, the part split off where the insert
    parted from the tree stamped t1, and the splits. One walk does exactly that, and it
    starts below `old`, the locked node this request's first `protected_pos` pages end at
    (its ancestors are the path there: a locked node is never evicted, and a split above
    or of it keeps it the node where those pages end), so the pages matched already are
    not matched again.
    Returns (new last node, clock, nodes, heap size, free pages, evictable pages).
    """
    t_a = clock  # the insert's time: what the insert split off keeps it
    t_b = clock + 1  # the final lookup's: the whole path
    clock += 2
    nd[root, ST] = t_b
    node = root
    pos = 0
    plen = 0
    # below `old`: its ancestors (and it) are the path's top, stamped here and not kept,
    # unless split_prompt must look for a boundary among them
    below = old != root and 0 < protected_pos <= key_n and not (
        0 < prompt_n < key_n and prompt_n != protected_pos)
    if old != root and 0 < protected_pos <= key_n:
        x = old
        while x != root:
            if below:
                if stamp_above:  # else the caller's walk over them stamps them t_b
                    nd[x, ST] = t_b
            else:
                path[plen] = x
                plen += 1
            x = nd[x, PA]
        for i in range(plen // 2):
            path[i], path[plen - 1 - i] = path[plen - 1 - i], path[i]
        node = old
        pos = protected_pos
    while pos < key_n:
        k = keys[ss + pos]
        child, sl = _find(tb, epoch, mask, node, k)
        if child == EMPTY:
            break
        length = nd[child, EL]
        m = _match_len(keys, nd[child, ES], ss + pos, min(length, key_n - pos))
        pos += m
        if m < length:  # split: the upper part is on the path, the rest keeps t_a
            mid = n_nodes
            n_nodes += 1
            _split(nd, tb, epoch, mask, keys, sl, child, m, mid)
            nd[child, ST] = t_a
            if nd[child, NC] == 0 and nd[child, LK] == 0:
                hsize = _heap_push(h_time, h_node, hsize, t_a, child)
            path[plen] = mid
            plen += 1
            node = mid
            break
        path[plen] = child
        plen += 1
        node = child
    if pos < key_n:
        leaf = n_nodes
        n_nodes += 1
        nd[leaf, ES] = ss + pos
        nd[leaf, EL] = key_n - pos
        nd[leaf, PA] = node
        nd[leaf, LK] = 0
        nd[leaf, NC] = 0
        nd[leaf, AL] = 1
        _put(tb, epoch, mask, node, keys[ss + pos], leaf)
        nd[node, NC] += 1
        evictable += key_n - pos
        path[plen] = leaf
        plen += 1
    if pos > protected:
        free_pages += pos - protected  # duplicates of pages the tree already held
    if 0 < prompt_n < key_n:  # split_prompt: a node boundary at the prompt's last page
        start = 0
        for i in range(plen):
            x = path[i]
            if start < prompt_n < start + nd[x, EL]:
                m = prompt_n - start
                mid = n_nodes
                n_nodes += 1
                _, sl = _find(tb, epoch, mask, nd[x, PA], keys[nd[x, ES]])
                _split(nd, tb, epoch, mask, keys, sl, x, m, mid)
                for j in range(plen, i, -1):
                    path[j] = path[j - 1]
                path[i] = mid
                plen += 1
                break
            start += nd[x, EL]
    for i in range(plen):
        nd[path[i], ST] = t_b
    if below:
        # the lock moves from `old` to a node below it: only the nodes between change
        # (unlocking and locking the shared part again nets to nothing, and a node
        # locked again here is pushed when it is finally unlocked)
        new_last = path[plen - 1] if plen > 0 else old
        x = new_last
        while x != old:
            if nd[x, LK] == 0:
                evictable -= nd[x, EL]
            nd[x, LK] += 1
            x = nd[x, PA]
        return new_last, clock, n_nodes, hsize, free_pages, evictable
    new_last = path[plen - 1] if plen > 0 else root
    if new_last != root and nd[new_last, NC] == 0 and nd[new_last, LK] == 0:
        hsize = _heap_push(h_time, h_node, hsize, t_b, new_last)
    # unlock the old node, lock the new one
    evictable, hsize = _unlock(nd, old, root, evictable, h_time, h_node, hsize, -1)
    evictable = _lock(nd, new_last, root, evictable, -1)
    return new_last, clock, n_nodes, hsize, free_pages, evictable


@njit(cache=True, inline="always")
def _release_tree(
    keys: np.ndarray, ss: int, key_n: int, prompt_n: int, old: int, protected: int,
    nd: np.ndarray, tb: np.ndarray, epoch: int, mask: int,
    h_time: np.ndarray, h_node: np.ndarray, clock: int, n_nodes: int, hsize: int,
    free_pages: int, evictable: int, path: np.ndarray, root: int,
) -> tuple[int, int, int, int, int]:
    """release_kv_cache(checkpoint=True) on the tree: checkpoint the first `key_n` pages
    (the request's lock at `old` over `protected` pages), then drop the lock (the path
    keeps the checkpoint's lookup time). The rest of the request's row (pages past key_n)
    is the caller's to free. Returns (clock, nodes, heap size, free pages, evictable)."""
    last, clock, n_nodes, hsize, free_pages, evictable = _checkpoint(
        keys, ss, key_n, prompt_n, old, protected, nd, tb, epoch, mask, h_time, h_node,
        clock, n_nodes, hsize, free_pages, evictable, path, protected, False, root)
    evictable, hsize = _unlock(nd, last, root, evictable, h_time, h_node, hsize, clock - 1)
    return clock, n_nodes, hsize, free_pages, evictable


@no_runtime
def sglang_replay(
    keys: np.ndarray,  # int64: page ids (kv_page_ids), one per full page of the KV
    offsets: np.ndarray,  # int64, n + 1
    resets: np.ndarray,  # bool, n
    prompt: np.ndarray,  # int64, n: L
    kv: np.ndarray,  # int64, n: K
    page: int,
    n_pages: int,  # pages of the pool (capacity // page)
    inflight: int,
    epoch0: int,  # first epoch (tb rows stamped below it are empty: no clearing per call)
    out_hit: np.ndarray,  # int64, n
    out_rejected: np.ndarray,  # bool, n
    nd: np.ndarray,  # int64, nodes x 8 (>= 1 + 8 x requests of one universe): ES edge start,
    #   EL pages of the edge, PA parent, LK lock count, ST last access time (a counter),
    #   NC live children, AL alive (1/0)
    tb: np.ndarray,  # int64, T x 4 (T a power of two >= 2 x nodes): child table (TN parent,
    #   TK first page id, TC child or EMPTY once evicted, TE epoch: below epoch0 = empty)
    h_time: np.ndarray,  # int64, heap of evictable leaves (lazy: stale entries skipped)
    h_node: np.ndarray,  # int64
    held_r: np.ndarray,  # int64, inflight: the request
    held_node: np.ndarray,  # int64, inflight: its locked node
    held_h: np.ndarray,  # int64, inflight: its hit pages
    path: np.ndarray,  # int64, scratch: 3 + pages of the longest KV
) -> None:
    mask = np.int64(tb.shape[0] - 1)
    epoch = np.int64(epoch0 - 1)
    clock = np.int64(1)
    n_nodes = np.int64(1)
    free_pages = np.int64(0)
    evictable = np.int64(0)  # pages of unlocked nodes
    hsize = 0
    q0 = 0
    qn = 0
    spare = page if page > 1 else 0  # prefill asks for a page more than it takes
    decode_room = page if page > 1 else 1  # decode keeps a page free
    for r in range(offsets.shape[0] - 1):
        if resets[r] or r == 0:
            epoch += 1
            clock = np.int64(1)
            n_nodes = np.int64(1)
            nd[0, PA] = EMPTY
            nd[0, LK] = 1
            nd[0, ST] = 0
            nd[0, NC] = 0
            nd[0, AL] = 1
            free_pages = np.int64(n_pages)
            evictable = np.int64(0)
            hsize = 0
            q0 = 0
            qn = 0
        s = offsets[r]
        L = prompt[r]
        K = kv[r]
        need = (K + page - 1) // page
        out_hit[r] = 0
        out_rejected[r] = False
        if need > n_pages or L <= 0:
            out_rejected[r] = True
            continue
        while qn > 0 and (qn >= inflight or free_pages + evictable < need):
            # release the oldest: checkpoint, free the rest of the row, unlock
            q = q0
            rr = held_r[q]
            kk = kv[rr]
            clock, n_nodes, hsize, free_pages, evictable = _release_tree(
                keys, offsets[rr], kk // page, prompt[rr] // page, held_node[q], held_h[q],
                nd, tb, epoch, mask, h_time, h_node, clock, n_nodes, hsize, free_pages,
                evictable, path, 0)
            free_pages += (kk + page - 1) // page - kk // page  # the partial page
            q0 = (q0 + 1) % inflight
            qn -= 1
        # admit r: match_prefix(prompt[:L - 1]) page-aligned, lock, prefill, decode
        n_walk = (L - 1) // page
        node = 0
        pos = 0
        if n_walk > 0:
            pos, node, clock, n_nodes, hsize = _walk(
                keys, s, n_walk, nd, tb, epoch, mask, h_time, h_node, clock,
                n_nodes, hsize)
        out_hit[r] = pos * page
        # the prefill checkpoint (when decoding follows) walks on from `node` and stamps
        # its ancestors with its lookup time, clock + 1: done here, nothing in between
        # reads a locked node's time
        early = K > L and node != 0
        evictable = _lock(nd, node, 0, evictable, clock + 1 if early else -1)
        # prefill: room for the new tokens and a page, then their pages; then decode. A
        # decode step changes nothing unless the one before took a page or it takes one,
        # so only those steps are run (about two per page, not one per token).
        pos_t = L - 1  # the token whose slot the phase allocates (L - 1: the prefill)
        while pos_t < K:
            if pos_t == L - 1:
                demand = (L - pos * page) + spare
                take = (L - pos * page + page - 1) // page
            else:
                demand = decode_room
                take = 1 if pos_t % page == 0 else 0
            avail = free_pages * page
            if avail < demand:  # RadixCache.evict: whole leaves, least recent first
                freed, hsize = _evict(nd, tb, epoch, mask, keys, h_time, h_node, hsize,
                                      demand - avail, page, 0)
                free_pages += freed
                evictable -= freed
            free_pages -= take
            if pos_t == L - 1 and K > L:  # unfinished after prefill: checkpoint_kv_cache
                node, clock, n_nodes, hsize, free_pages, evictable = _checkpoint(
                    keys, s, L // page, L // page, node, pos, nd, tb, epoch, mask,
                    h_time, h_node, clock, n_nodes, hsize, free_pages, evictable, path,
                    pos, not early)
                pos = L // page
            if pos_t == L - 1 or take > 0 or pos_t == L:
                pos_t += 1
            else:  # nothing changes until the step that takes the next page
                pos_t = (pos_t // page + 1) * page
        slot_q = (q0 + qn) % inflight
        held_r[slot_q] = r
        held_node[slot_q] = node
        held_h[slot_q] = pos
        qn += 1

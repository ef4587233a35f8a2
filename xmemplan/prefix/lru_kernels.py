"""numba kernels of the finite (LRU) prefix cache: every capacity in one pass.

Kernels take only arrays and scalars; `xmemplan.prefix.lru` is the driver and holds the
readable reference (`ReferenceLRU`) these are tested against.

Why one pass is exact (Mattson et al., "Evaluation techniques for storage hierarchies", IBM
Systems Journal 9(2), 1970: LRU is a stack algorithm). Each request touches the pages of its
path from the deepest to the root, so every page is more recently used than any page below
it. Then, for every capacity C, LRU holds the most recently used pages that fit in C, that
set is closed under "parent of" (no unreachable descendants are ever cached), LRU evicts
only leaves (it is SGLang's leaf-first radix-cache LRU), and a request's hit at capacity C is
the number of its leading pages whose *stack depth* (tokens of the pages used more recently
than it, plus its own) is at most C. Depths grow along a path, so one sorted list of depths
per request answers every capacity at once.

Depths without a per-page stack. The owner of a page is the last request that touched it.
A request's path is owned by a few earlier requests, newest first from the root, and each
owner still owns a contiguous run of its own path, starting right where the newer owners'
pages end. So the depth of the page at position i of a run owned by request s, starting at
position a, is

    depth = W(s) + (i - a + 1) x page_tokens,   W(s) = tokens owned by requests after s,

and W(s) is one prefix sum over requests (a Fenwick tree). The cost per request is the
radix-tree walk the infinite cache does anyway, plus O(log n) per owner run, not per page.

The tree is the path-compressed radix tree of `xmemplan.prefix.kernels` (edges are slices of
the input keys, so inserting copies nothing), with two changes:
an edge is also split where a request *ends* inside it (so that every node has one owner),
and `owner[node]` records the last request that touched the node.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from xmemplan.prefix.kernels import _common, _slot

EMPTY = -1


@njit(cache=True, inline="always")
def _fen_add(fen: np.ndarray, i: int, v: int) -> None:
    i += 1
    n = fen.shape[0]
    while i < n:
        fen[i] += v
        i += i & (-i)


@njit(cache=True, inline="always")
def _fen_range(fen: np.ndarray, lo: int, hi: int) -> int:
    """Sum of entries lo..hi-1 (lo <= hi).

    Walks both prefix sums down only until they meet, so the cost is O(log(hi - lo)), not
    O(log n): most owners are recent requests (agents resend the previous request).
    """
    s = np.int64(0)
    while hi != lo:
        if hi > lo:
            s += fen[hi]
            hi -= hi & (-hi)
        else:
            s -= fen[lo]
            lo -= lo & (-lo)
    return s


@njit(cache=True)
def lru_replay(
    keys: np.ndarray,  # int64, all requests' page keys, flat
    offsets: np.ndarray,  # int64, n + 1
    resets: np.ndarray,  # bool, n: empty the cache before request r
    page_tokens: np.ndarray,  # int64, n: tokens per page of request r
    prompt: np.ndarray,  # int64, n: prompt tokens (caps the hit of a partial last page)
    ts: np.ndarray,  # float64, n: arrival time in seconds, NaN = unknown
    caps: np.ndarray,  # int64, J: capacities in tokens, ascending
    gap_edges: np.ndarray,  # float64, G + 1: bins of the reuse-gap histogram, ascending
    out_matched: np.ndarray,  # int64, n: leading pages cached in an infinite cache
    out_hits: np.ndarray,  # int64, n x J: leading pages cached in an LRU of capacity caps[j]
    out_gap: np.ndarray,  # float64, n: seconds since the deepest hit page was last used
    out_gap_tokens: np.ndarray,  # float64, G: hit tokens (infinite cache) by reuse gap
    out_stats: np.ndarray,  # int64, 1: [0] the most distinct page tokens of one cache
    e_start: np.ndarray,  # int64, >= 1 + 2 x requests between two resets
    e_len: np.ndarray,  # int64, same size
    owner: np.ndarray,  # int64, same size
    t_node: np.ndarray,  # int64, table (a power of two, >= 2 x nodes)
    t_key: np.ndarray,  # int64, table
    t_child: np.ndarray,  # int64, table
    t_epoch: np.ndarray,  # int64, table, starts all -1
    added: np.ndarray,  # int64, n + 1: added[r] = tokens of the pages of requests < r
    fen: np.ndarray,  # int64, n + 1, zeros: tokens taken from each request (Fenwick)
    path: np.ndarray,  # int64, >= 1 + pages of the longest request: nodes of the hit path
    path_pos: np.ndarray,  # int64, same size: position where each path node starts
    run_owner: np.ndarray,  # int64, same size: owner runs along the path
    run_pos: np.ndarray,  # int64, same size: position where each run starts
    run_w: np.ndarray,  # int64, same size: W(owner) of each run
    ids_off: np.ndarray,  # int64, n + 1 or 0 (no ids wanted): the engine models' layout
    ids_have: np.ndarray,  # int64, n: pages of request r whose ids come from its keys
    ids_never: int,  # id of every later page when < 0, else each its own (len(keys) + i)
    out_ids: np.ndarray,  # int64, ids_off[n]: one id per full page of each request's KV
    #   (equal ids, equal prefixes): its prefix's number, in order of first appearance
    ids_dense: np.ndarray,  # int64, len(keys) when ids are wanted: the number of the
    #   prefix ending at each key, written where the key first appears
    ids_count: np.ndarray,  # int64, 1: [0] prefixes numbered (the ids below it)
) -> None:
    """For each request in order: its hits at every capacity, then touch its path."""
    mask = np.int64(t_node.shape[0] - 1)
    n_caps = caps.shape[0]
    n_bins = gap_edges.shape[0] - 1
    epoch = np.int64(0)
    n_nodes = np.int64(1)
    distinct = np.int64(0)
    out_stats[0] = 0
    owner[0] = EMPTY
    for r in range(offsets.shape[0] - 1):
        if resets[r]:
            epoch += 1
            n_nodes = np.int64(1)
            distinct = np.int64(0)
        s = offsets[r]
        n = offsets[r + 1] - s
        bt = page_tokens[r]
        node = np.int64(0)
        pos = np.int64(0)
        depth = 0  # nodes on the matched path
        while pos < n:
            k = keys[s + pos]
            slot = _slot(node, k, mask)
            child = np.int64(EMPTY)
            while t_epoch[slot] == epoch:
                if t_node[slot] == node and t_key[slot] == k:
                    child = t_child[slot]
                    break
                slot = (slot + 1) & mask
            if child == EMPTY:
                break
            length = e_len[child]
            lim = min(length, n - pos)
            m = _common(keys, e_start[child], keys, s + pos, lim)
            if m < length:
                # Split the edge after m keys: on a mismatch, or where the request ends, so
                # that the part this request touches gets this request as its owner.
                mid = n_nodes
                n_nodes += 1
                e_start[mid] = e_start[child]
                e_len[mid] = m
                owner[mid] = owner[child]
                t_child[slot] = mid
                e_start[child] += m
                e_len[child] -= m
                k1 = keys[e_start[child]]
                slot2 = _slot(mid, k1, mask)
                while t_epoch[slot2] == epoch:
                    slot2 = (slot2 + 1) & mask
                t_node[slot2] = mid
                t_key[slot2] = k1
                t_child[slot2] = child
                t_epoch[slot2] = epoch
                child = mid
            path[depth] = child
            path_pos[depth] = pos
            depth += 1
            pos += m
            node = child
            if m < length:
                break
        out_matched[r] = pos
        if ids_off.shape[0] > 0:  # edges are slices of the input where they first appeared
            o = ids_off[r]
            h = ids_have[r]
            for i in range(depth):
                a = path_pos[i]
                if a >= h:
                    break
                b = min(path_pos[i + 1] if i + 1 < depth else pos, h)
                e0 = e_start[path[i]] - a
                for j in range(a, b):
                    out_ids[o + j] = ids_dense[e0 + j]
            c = ids_count[0]
            for j in range(pos, n):  # new prefixes: numbered here, found by later requests
                ids_dense[s + j] = c
                if j < h:
                    out_ids[o + j] = c
                c += 1
            ids_count[0] = c
            base = keys.shape[0]
            for i in range(o + h, ids_off[r + 1]):
                out_ids[i] = ids_never if ids_never < 0 else base + i

        # Owner runs along the path (owners only get older going down): W per run.
        runs = 0
        i = 0
        while i < depth:
            o = owner[path[i]]
            j = i + 1
            while j < depth and owner[path[j]] == o:
                j += 1
            run_owner[runs] = o
            run_pos[runs] = path_pos[i]
            # tokens owned by requests o+1 .. r-1: what they added less what was taken
            # (depths: only capacities ask for them)
            run_w[runs] = added[r] - added[o + 1] - _fen_range(fen, o + 1, r) \
                if n_caps > 0 else 0
            runs += 1
            i = j
        run_pos[runs] = pos

        # Hits at every capacity: the first page deeper than C ends the hit.
        jc = 0
        for q in range(runs):
            a = run_pos[q]
            w = run_w[q]
            last = w + (run_pos[q + 1] - a) * bt
            while jc < n_caps and caps[jc] < last:
                c = caps[jc]
                out_hits[r, jc] = a + ((c - w) // bt if c > w else 0)
                jc += 1
        while jc < n_caps:
            out_hits[r, jc] = pos
            jc += 1

        # Reuse gaps: time since each hit run was last used, weighted by its hit tokens.
        out_gap[r] = np.nan
        t_now = ts[r]
        p_r = prompt[r]
        if runs > 0 and t_now == t_now:  # not NaN
            out_gap[r] = t_now - ts[run_owner[runs - 1]]
            for q in range(runs):
                gap = t_now - ts[run_owner[q]]
                tok = min(run_pos[q + 1] * bt, p_r) - min(run_pos[q] * bt, p_r)
                if gap == gap and tok > 0 and n_bins > 0:
                    g = 0
                    while g < n_bins - 1 and gap >= gap_edges[g + 1]:
                        g += 1
                    out_gap_tokens[g] += tok

        # Ownership moves to r: first the runs' pages, then the new pages.
        for q in range(runs if n_caps > 0 else 0):
            _fen_add(fen, run_owner[q], (run_pos[q + 1] - run_pos[q]) * bt)
        added[r + 1] = added[r] + n * bt
        for i in range(depth):
            owner[path[i]] = r
        if pos < n:
            leaf = n_nodes
            n_nodes += 1
            e_start[leaf] = s + pos  # the edge is a slice of the input: nothing is copied
            e_len[leaf] = n - pos
            owner[leaf] = r
            distinct += (n - pos) * bt
            if distinct > out_stats[0]:
                out_stats[0] = distinct
            k = keys[s + pos]
            slot = _slot(node, k, mask)
            while t_epoch[slot] == epoch:
                slot = (slot + 1) & mask
            t_node[slot] = node
            t_key[slot] = k
            t_child[slot] = leaf
            t_epoch[slot] = epoch

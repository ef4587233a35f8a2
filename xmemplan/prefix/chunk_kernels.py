"""numba kernel: token-exact prefix matching of interned prompts, without materialising them.

Input: prompts as nodes of a trie of interned chunks (`xmemplan.traces._build.PromptSet`):
node n is its parent's tokens followed by chunk `chunk[n]`, whose tokens are
`tokens[chunk_start[c] : chunk_start[c] + chunk_len[c]]`.

The cache is the radix tree of `xmemplan.prefix.kernels` over TOKENS (so every figure is
the token-level one), with edges that are slices of the chunk store, plus three changes:
- every chunk boundary of an inserted prompt is a tree node, and `loc[p]` remembers the
  tree node of prompt-trie node p. The token trie has one node per token prefix, so the
  match of a prompt passes through `loc[a]` for every located ancestor a: a request starts
  at its deepest located ancestor (found by walking up its prompt-trie path, which stops
  after the messages new since an earlier prompt) instead of at the root;
- where an edge and the request read the same place of the chunk store they hold the same
  tokens, and the compare is skipped; elsewhere tokens are compared one by one, so a
  message edited in the middle, or the same text under another chunk id, still matches to
  the exact token;
- `loc` carries an epoch, like the child table, so a reset (a new session) is O(1).

Cost per request: the messages after its deepest located ancestor plus the tokens that
really differ, not the prompt length. Nodes: at most one per located prompt node and one
split per request (the driver sizes the arrays once).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from xmemplan.prefix.kernels import _common, _slot

EMPTY = -1


@njit(cache=True, inline="always")
def _find(t_node, t_key, t_child, t_epoch, node, key, epoch, mask):
    slot = _slot(node, key, mask)
    while t_epoch[slot] == epoch:
        if t_node[slot] == node and t_key[slot] == key:
            return slot
        slot = (slot + 1) & mask
    return EMPTY


@njit(cache=True, inline="always")
def _put(t_node, t_key, t_child, t_epoch, node, key, child, epoch, mask):
    slot = _slot(node, key, mask)
    while t_epoch[slot] == epoch:
        slot = (slot + 1) & mask
    t_node[slot] = node
    t_key[slot] = key
    t_child[slot] = child
    t_epoch[slot] = epoch


@njit(cache=True)
def match_prompts(
    tokens: np.ndarray,  # int64: distinct chunks back to back
    chunk_start: np.ndarray,  # int64 (C,)
    chunk_len: np.ndarray,  # int64 (C,)
    parent: np.ndarray,  # int64 (P,): prompt-trie parent (-1 for the root, node 0)
    chunk: np.ndarray,  # int64 (P,)
    depth: np.ndarray,  # int64 (P,): tokens of the prompt ending at the node
    req_node: np.ndarray,  # int64 (n,): each request's prompt node, in replay order
    resets: np.ndarray,  # bool (n,): empty the cache before request r (resets[0] True)
    out_matched: np.ndarray,  # int64 (n,): leading tokens found in the cache
    loc: np.ndarray,  # int64 (P,): tree node of a prompt node
    loc_epoch: np.ndarray,  # int64 (P,), starts all -1
    stack: np.ndarray,  # int64 (P,): prompt nodes below the start, deepest first
    e_start: np.ndarray,  # int64 (N,): edge label start in `tokens`
    e_len: np.ndarray,  # int64 (N,)
    t_node: np.ndarray,  # int64 (T,), T a power of two >= 2 N
    t_key: np.ndarray,  # int64 (T,)
    t_child: np.ndarray,  # int64 (T,)
    t_epoch: np.ndarray,  # int64 (T,), starts all -1
) -> int:
    """For each request in order: its longest cached token prefix, then insert it.

    Returns the most tree nodes used (for tests of the sizing)."""
    mask = np.int64(t_node.shape[0] - 1)
    epoch = np.int64(-1)
    n_nodes = np.int64(1)
    most = np.int64(1)
    for r in range(req_node.shape[0]):
        if resets[r]:
            epoch += 1
            n_nodes = np.int64(1)
        # Deepest ancestor already in the tree (the root always is).
        p = req_node[r]
        top = 0
        while p > 0 and loc_epoch[p] != epoch:
            stack[top] = p
            top += 1
            p = parent[p]
        x = np.int64(0) if p <= 0 else loc[p]
        matched = depth[p] if p > 0 else np.int64(0)
        y = np.int64(EMPTY)  # inside the edge into y, eo tokens along it
        eo = np.int64(0)
        missed = False
        for i in range(top - 1, -1, -1):
            pn = stack[i]
            c = chunk[pn]
            q = chunk_start[c]
            rest = chunk_len[c]
            if not missed:
                while rest > 0:
                    if y == EMPTY:
                        slot = _find(t_node, t_key, t_child, t_epoch, x, tokens[q], epoch, mask)
                        if slot == EMPTY:
                            missed = True
                            break
                        y = t_child[slot]
                        eo = 0
                    lim = min(e_len[y] - eo, rest)
                    a = e_start[y] + eo
                    m = lim if a == q else _common(tokens, a, tokens, q, lim)
                    eo += m
                    q += m
                    rest -= m
                    matched += m
                    if m < lim:
                        missed = True
                        break
                    if eo == e_len[y]:
                        x = y
                        y = EMPTY
                        eo = 0
                if y != EMPTY and (missed or rest == 0):
                    # Split the edge into y after eo tokens: at the mismatch, or where the
                    # chunk ends (so that the chunk boundary is a node).
                    mid = n_nodes
                    n_nodes += 1
                    e_start[mid] = e_start[y]
                    e_len[mid] = eo
                    slot = _find(t_node, t_key, t_child, t_epoch, x, tokens[e_start[y]],
                                 epoch, mask)
                    t_child[slot] = mid
                    e_start[y] += eo
                    e_len[y] -= eo
                    _put(t_node, t_key, t_child, t_epoch, mid, tokens[e_start[y]], y, epoch,
                         mask)
                    x = mid
                    y = EMPTY
                    eo = 0
            if rest > 0:  # the rest of this chunk is new: a leaf edge (a slice of the store)
                leaf = n_nodes
                n_nodes += 1
                e_start[leaf] = q
                e_len[leaf] = rest
                _put(t_node, t_key, t_child, t_epoch, x, tokens[q], leaf, epoch, mask)
                x = leaf
            loc[pn] = x
            loc_epoch[pn] = epoch
        out_matched[r] = matched
        if n_nodes > most:
            most = n_nodes
    return most

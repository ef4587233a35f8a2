"""Driver of the interned-prompt matcher (`chunk_kernels`): checks arrays, sizes the tree once.

    from xmemplan.prefix.chunks import match_prompts
    matched = match_prompts(batch.prompts, batch.nodes[order], resets)

The figures are those of `xmemplan.prefix.matcher.match` on the materialised token ids
(tests hold it to that and to the plain-Python trie), at a cost that grows with the
distinct messages rather than with calls x prompt length.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from xmemplan.traces._build import PromptSet


def tree_size(prompts: PromptSet, n_requests: int) -> tuple[int, int]:
    """(nodes, table slots): one node per prompt node and one split per request suffice.

    A prompt node is located at most once per reset and adds at most one node (a leaf or a
    split at its boundary); a request adds at most one more split, at its mismatch.
    """
    nodes = 2 + prompts.parent.shape[0] + n_requests
    table = 1 << max(4, int(2 * nodes - 1).bit_length())
    return nodes, table


def match_prompts(
    prompts: PromptSet, nodes: np.ndarray, resets: np.ndarray
) -> np.ndarray:
    """Leading tokens of each prompt (`nodes`, in replay order) found in the cache built from
    the prompts before it; `resets[r]` empties the cache before request r. Infinite cache."""
    from xmemplan.prefix.chunk_kernels import match_prompts as kernel

    nodes = np.ascontiguousarray(nodes, dtype=np.int64)
    resets = np.ascontiguousarray(resets, dtype=np.bool_)
    n = nodes.shape[0]
    if resets.shape[0] != n:
        raise ValueError("resets must have one entry per request")
    if n == 0:
        return np.empty(0, dtype=np.int64)
    n_prompt = prompts.parent.shape[0]
    if nodes.min() < 0 or nodes.max() >= n_prompt:
        raise ValueError("prompt nodes out of range")
    resets = resets.copy()
    resets[0] = True
    size, table = tree_size(prompts, n)
    out = np.empty(n, dtype=np.int64)
    kernel(
        prompts.tokens, prompts.chunk_start, prompts.chunk_len, prompts.parent, prompts.chunk,
        prompts.depth, nodes, resets, out,
        np.empty(n_prompt, dtype=np.int64), np.full(n_prompt, -1, dtype=np.int64),
        np.empty(n_prompt, dtype=np.int64),
        np.empty(size, dtype=np.int64), np.empty(size, dtype=np.int64),
        np.empty(table, dtype=np.int64), np.empty(table, dtype=np.int64),
        np.empty(table, dtype=np.int64), np.full(table, -1, dtype=np.int64),
    )
    return out

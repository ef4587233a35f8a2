"""numba kernels of `xmemplan.traces.keys` (imported on first use, so that reading a trace
format that needs none of them does not load numba)."""

from __future__ import annotations

import numpy as np
from numba import njit

from xmemplan import numba_load

numba_load.install()  # cached kernels load without numba's compiler registries


@njit(cache=True, inline="always")
def _mix(x: np.uint64) -> np.uint64:
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


@njit(cache=True)
def _namespace_kernel(ids: np.ndarray, seed: np.uint64, out: np.ndarray) -> None:
    for i in range(ids.shape[0]):
        out[i] = np.int64(_mix(np.uint64(ids[i]) ^ seed))


@njit(cache=True)
def _chain_kernel(ids: np.ndarray, offsets: np.ndarray, seed: np.uint64, out: np.ndarray) -> None:
    for r in range(offsets.shape[0] - 1):
        h = seed
        for i in range(offsets[r], offsets[r + 1]):
            h = _mix(h ^ _mix(np.uint64(ids[i])))
            out[i] = np.int64(h)


@njit(cache=True)
def page_keys_kernel(
    tokens: np.ndarray,  # int64, flat token ids
    offsets: np.ndarray,  # int64, n + 1
    page: int,  # tokens per page
    out: np.ndarray,  # int64, sum(len // page)
    out_offsets: np.ndarray,  # int64, n + 1
) -> None:
    """Token ids -> one prefix-chained key per FULL page: page j's key hashes tokens [0, (j+1)P).

    The tail that does not fill a page gets no key: it is never cached (vLLM and SGLang with
    page size > 1 cache whole pages only). Inside a page, four independent multiply-add lanes
    (tokens i mod 4) keep the CPU busy; each page's lanes are then folded into the chain with
    the splitmix64 finalizer, so a key depends on every token before it and on its position.
    """
    w = np.int64(0)
    out_offsets[0] = 0
    m0 = np.uint64(0x9E3779B97F4A7C15)
    m1 = np.uint64(0xC2B2AE3D27D4EB4F)
    m2 = np.uint64(0x165667B19E3779F9)
    m3 = np.uint64(0xD6E8FEB86659FD93)
    for r in range(offsets.shape[0] - 1):
        h = np.uint64(0x243F6A8885A308D3)
        s = offsets[r]
        n_pages = (offsets[r + 1] - s) // page
        for j in range(n_pages):
            a0 = np.uint64(1)
            a1 = np.uint64(2)
            a2 = np.uint64(3)
            a3 = np.uint64(4)
            i = s + j * page
            end = i + page
            while i + 4 <= end:
                a0 = a0 * m0 + np.uint64(tokens[i])
                a1 = a1 * m1 + np.uint64(tokens[i + 1])
                a2 = a2 * m2 + np.uint64(tokens[i + 2])
                a3 = a3 * m3 + np.uint64(tokens[i + 3])
                i += 4
            while i < end:
                a0 = a0 * m1 + np.uint64(tokens[i])
                i += 1
            h = _mix(h ^ a0)
            h = _mix(h ^ a1)
            h = _mix(h ^ a2)
            h = _mix(h ^ a3)
            out[w] = np.int64(h)
            w += 1
        out_offsets[r + 1] = w


@njit(cache=True)
def prompt_tokens_kernel(
    tokens: np.ndarray,  # int64, distinct chunks back to back
    chunk_start: np.ndarray,  # int64 (C,)
    chunk_len: np.ndarray,  # int64 (C,)
    parent: np.ndarray,  # int64 (P,): prompt-trie parent, -1 for the root (node 0)
    chunk: np.ndarray,  # int64 (P,): the chunk a node appends to its parent
    nodes: np.ndarray,  # int64 (n,): the prompts to write
    offsets: np.ndarray,  # int64 (n + 1,): where each prompt goes in `out`
    out: np.ndarray,  # int64 (offsets[-1],)
) -> None:
    """Write the token ids of interned prompts (`xmemplan.traces._build.PromptSet`) flat,
    each from its end back to the root."""
    for r in range(nodes.shape[0]):
        end = offsets[r + 1]
        p = nodes[r]
        while p > 0:
            c = chunk[p]
            n = chunk_len[c]
            s = chunk_start[c]
            end -= n
            for i in range(n):
                out[end + i] = tokens[s + i]
            p = parent[p]

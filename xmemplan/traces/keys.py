"""Every cache key is built here: namespaced block ids, chained per-block hashes, page keys
of token ids, the token ids of interned text prompts, and the SGLang-style string keys a
HiCache backend stores pages under.

All use the splitmix64 finalizer (Steele et al., "Fast splittable pseudorandom number
generators", OOPSLA 2014) as a 64-bit mixer: collisions between distinct inputs happen with
probability ~2^-64 per pair, far below anything a trace can show.
"""

from __future__ import annotations

import hashlib

import numpy as np
import xxhash
from numba import njit


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


def session_seed(session_id: str) -> np.uint64:
    """A 64-bit namespace for one session's local ids."""
    return np.uint64(xxhash.xxh64_intdigest(session_id.encode("utf-8")))


def namespace(ids: np.ndarray, session_id: str) -> np.ndarray:
    """Make session-local ids global: distinct (session, id) pairs map to distinct keys."""
    out = np.empty(ids.shape[0], dtype=np.int64)
    _namespace_kernel(np.ascontiguousarray(ids, dtype=np.int64), session_seed(session_id), out)
    return out


def chain(ids: np.ndarray, offsets: np.ndarray, seed: int = 0) -> np.ndarray:
    """Per-block hashes -> prefix-chained keys: key[i] depends on ids[start..i] of its request.

    Two requests get equal key i exactly when their first i+1 block hashes are equal, which
    is what a prefix cache can reuse (Qwen-Bailian hashes each block on its own).
    """
    out = np.empty(ids.shape[0], dtype=np.int64)
    _chain_kernel(
        np.ascontiguousarray(ids, dtype=np.int64),
        np.ascontiguousarray(offsets, dtype=np.int64),
        np.uint64(seed),
        out,
    )
    return out


@njit(cache=True)
def page_keys(
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
def prompt_tokens(
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


def sglang_style_keys(page_ids: np.ndarray) -> list[str]:
    """Backend keys as SGLang makes them: chained SHA-256 hex, one per page.

    SGLang hashes each page's token ids seeded with the previous page's digest
    (`get_hash_str`), so a key names the whole prefix up to its page. Here a page's id
    stands in for its tokens.
    """
    keys = []
    prior = b""
    for pid in page_ids.tolist():
        digest = hashlib.sha256(prior + int(pid).to_bytes(8, "little", signed=True)).digest()
        keys.append(digest.hex())
        prior = digest
    return keys

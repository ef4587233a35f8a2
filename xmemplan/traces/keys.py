"""Every cache key is built here: namespaced block ids, chained per-block hashes, page keys
of token ids, the token ids of interned text prompts, and the SGLang-style string keys a
HiCache backend stores pages under.

All use the splitmix64 finalizer (Steele et al., "Fast splittable pseudorandom number
generators", OOPSLA 2014) as a 64-bit mixer: collisions between distinct inputs happen with
probability ~2^-64 per pair, far below anything a trace can show. The numba kernels live in
`_key_kernels` and load on first use.
"""

from __future__ import annotations

import hashlib

import numpy as np
import xxhash


def session_seed(session_id: str) -> np.uint64:
    """A 64-bit namespace for one session's local ids."""
    return np.uint64(xxhash.xxh64_intdigest(session_id.encode("utf-8")))


def namespace(ids: np.ndarray, session_id: str) -> np.ndarray:
    """Make session-local ids global: distinct (session, id) pairs map to distinct keys."""
    from xmemplan.traces._key_kernels import _namespace_kernel

    out = np.empty(ids.shape[0], dtype=np.int64)
    _namespace_kernel(np.ascontiguousarray(ids, dtype=np.int64), session_seed(session_id), out)
    return out


def chain(ids: np.ndarray, offsets: np.ndarray, seed: int = 0) -> np.ndarray:
    """Per-block hashes -> prefix-chained keys: key[i] depends on ids[start..i] of its request.

    Two requests get equal key i exactly when their first i+1 block hashes are equal, which
    is what a prefix cache can reuse (Qwen-Bailian hashes each block on its own).
    """
    from xmemplan.traces._key_kernels import _chain_kernel

    out = np.empty(ids.shape[0], dtype=np.int64)
    _chain_kernel(
        np.ascontiguousarray(ids, dtype=np.int64),
        np.ascontiguousarray(offsets, dtype=np.int64),
        np.uint64(seed),
        out,
    )
    return out


def page_keys(
    tokens: np.ndarray, offsets: np.ndarray, page: int, out: np.ndarray, out_offsets: np.ndarray
) -> None:
    """Token ids -> one prefix-chained key per FULL page: page j's key hashes tokens [0, (j+1)P).

    `tokens`/`offsets` (int64) hold the requests back to back; `out` gets sum(len // page)
    keys and `out_offsets` the n + 1 offsets into it. The tail that does not fill a page gets
    no key: it is never cached (vLLM and SGLang with page size > 1 cache whole pages only).
    """
    from xmemplan.traces._key_kernels import page_keys_kernel

    page_keys_kernel(tokens, offsets, page, out, out_offsets)


def prompt_tokens(
    tokens: np.ndarray, chunk_start: np.ndarray, chunk_len: np.ndarray, parent: np.ndarray,
    chunk: np.ndarray, nodes: np.ndarray, offsets: np.ndarray, out: np.ndarray,
) -> None:
    """Write the token ids of interned prompts (`xmemplan.traces._build.PromptSet`) flat:
    prompt r (node `nodes[r]`) goes to `out[offsets[r]:offsets[r + 1]]`."""
    from xmemplan.traces._key_kernels import prompt_tokens_kernel

    prompt_tokens_kernel(tokens, chunk_start, chunk_len, parent, chunk, nodes, offsets, out)


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

"""Key construction: namespacing session-local block ids and chaining per-block hashes.

Both use the splitmix64 finalizer (Steele et al., "Fast splittable pseudorandom number
generators", OOPSLA 2014) as a 64-bit mixer: collisions between distinct inputs happen with
probability ~2^-64 per pair, far below anything a trace can show.
"""

from __future__ import annotations

import numpy as np
import xxhash
from numba import njit

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


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

"""KV pages for `validate`: a host pool in SGLang's layout and page contents derived from
their key, so that every byte read back can be checked."""

from __future__ import annotations

from typing import Any

import numpy as np

from xmemplan.errors import UsageError


class Pattern:
    """Page contents derived from the key: fast to make and to check (no RNG per page)."""

    def __init__(self, page_bytes: int, seed: int) -> None:
        words = -(-page_bytes // 8)
        self.base = np.random.default_rng(seed).integers(0, 2**63, words, dtype=np.int64)
        self.page_bytes = page_bytes
        self.seed = seed
        self._scratch = np.empty(words, dtype=np.int64)

    def fill(self, key: int, parts: list[np.ndarray]) -> None:
        np.bitwise_xor(self.base, np.int64(key), out=self._scratch)
        want = self._scratch.view(np.uint8)
        off = 0
        for part in parts:
            part[:] = want[off:off + part.shape[0]]
            off += part.shape[0]

    def check(self, key: int, parts: list[np.ndarray]) -> bool:
        np.bitwise_xor(self.base, np.int64(key), out=self._scratch)
        want = self._scratch.view(np.uint8)
        off = 0
        for part in parts:
            if not np.array_equal(part, want[off:off + part.shape[0]]):
                return False
            off += part.shape[0]
        return True


def host_pool(model: Any, pages: int, page_tokens: int, layout: str = "page_first",
               pinned: bool = False) -> Any:
    """A host pool for `pages` pages; page-locked (as SGLang's) when `pinned` (needs CUDA)."""
    from xmemplan.backends.hostpool import HostPool

    buffer = keep = None
    if pinned:
        import torch

        keep = torch.empty(pages * page_tokens * model.kv_bytes_per_token, dtype=torch.uint8,
                           pin_memory=True)
        buffer = keep.numpy()
    if model.attention != "mla" and model.kv_dtype_bytes in (1, 2):
        dtype = "uint16" if model.kv_dtype_bytes == 2 else "uint8"
        pool = HostPool(model.layers, model.kv_heads, model.head_dim, pages * page_tokens,
                        page_tokens, layout, dtype, buffer=buffer)
    else:
        # MLA / other: one "head" holding the token's bytes (K half, V half).
        per_token = model.kv_bytes_per_token
        if per_token % 2:
            raise UsageError(f"model {model.name}: odd KV bytes per token")
        pool = HostPool(1, 1, per_token // 2, pages * page_tokens, page_tokens, layout,
                        "uint8", buffer=buffer)
    pool.pinned_tensor = keep  # keeps page-locked memory alive with the pool
    return pool


def page_view(pool: Any, page: int) -> list[np.ndarray]:
    return pool.page_parts(page)



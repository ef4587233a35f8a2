"""A host KV pool in SGLang's memory layout, in numpy (no torch): for `validate` and tests.

It implements the part of SGLang's `MHATokenToKVPoolHost` that storage backends touch:
`layout`, `page_size`, `size`, `kv_buffer`, `get_size_per_token()`,
`get_page_buffer_meta(indices)` (same pointer formulas as SGLang 0.5.23,
`sglang/srt/mem_cache/pool_host/mha.py`) and `get_data_page(index)`.

Layouts (L layers, P page size, H KV heads, D head dim):
- `page_first`:  kv_buffer (2, size, L, H, D); a page is 2 runs (K, V) of L*P*H*D items.
- `layer_first`: kv_buffer (2, L, size, H, D); a page is 2*L runs (K, V per layer) of P*H*D.
"""

from __future__ import annotations

from typing import Any

import numpy as np

LAYOUTS = ("page_first", "layer_first")


class HostPool:
    """`size` token slots (a multiple of `page_size`) of KV for one TP rank."""

    def __init__(
        self,
        layer_num: int,
        head_num: int,
        head_dim: int,
        size: int,
        page_size: int,
        layout: str = "page_first",
        dtype: np.dtype | str = "uint16",  # bf16 has no numpy dtype: same bytes as uint16
        buffer: np.ndarray | None = None,
    ) -> None:
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}")
        if size % page_size:
            raise ValueError("size must be a multiple of page_size")
        self.layer_num, self.head_num, self.head_dim = layer_num, head_num, head_dim
        self.size, self.page_size, self.layout = size, page_size, layout
        self.dtype = np.dtype(dtype)
        self.pinned_tensor: Any = None  # owner of page-locked memory behind `buffer`, if any
        shape = (
            (2, size, layer_num, head_num, head_dim) if layout == "page_first"
            else (2, layer_num, size, head_num, head_dim)
        )
        if buffer is None:
            self.kv_buffer = np.zeros(shape, dtype=self.dtype)
        else:
            self.kv_buffer = buffer.view(self.dtype).reshape(shape)

    @property
    def page_bytes(self) -> int:
        return self.get_size_per_token() * self.page_size

    def get_size_per_token(self) -> int:
        return 2 * self.layer_num * self.head_num * self.head_dim * self.dtype.itemsize

    def get_page_buffer_meta(self, indices: Any) -> tuple[list[int], list[int]]:
        idx = indices.tolist() if hasattr(indices, "tolist") else list(indices)
        if len(idx) % self.page_size:
            raise ValueError("indices must cover whole pages")
        base = self.kv_buffer.ctypes.data
        item = self.dtype.itemsize
        row = self.head_num * self.head_dim * item  # one token of one layer
        v_offset = self.layer_num * self.size * row
        ptrs: list[int] = []
        if self.layout == "layer_first":
            for start in range(0, len(idx), self.page_size):
                for layer in range(self.layer_num):
                    k = base + idx[start] * row + layer * self.size * row
                    ptrs += [k, k + v_offset]
            size = self.page_size * row
        else:
            for start in range(0, len(idx), self.page_size):
                k = base + idx[start] * self.layer_num * row
                ptrs += [k, k + v_offset]
            size = self.layer_num * self.page_size * row
        return ptrs, [size] * len(ptrs)

    def get_data_page(self, index: int, flat: bool = True) -> np.ndarray:
        if self.layout == "layer_first":
            page = self.kv_buffer[:, :, index : index + self.page_size]
        else:
            page = self.kv_buffer[:, index : index + self.page_size]
        return page.reshape(-1) if flat else page

    def page_parts(self, page: int) -> list[np.ndarray]:
        """Writable uint8 views of host page `page`, in stored order (all K, then all V)."""
        kv = self.kv_buffer.view(np.uint8).reshape(self.kv_buffer.shape[:-1] + (-1,))
        s = slice(page * self.page_size, (page + 1) * self.page_size)
        if self.layout == "page_first":
            return [kv[0, s].reshape(-1), kv[1, s].reshape(-1)]
        return [kv[h, layer, s].reshape(-1) for h in (0, 1) for layer in range(self.layer_num)]

    def page_indices(self, page: int) -> np.ndarray:
        """Host token indices of host page number `page` (what SGLang passes to v1 calls)."""
        start = page * self.page_size
        return np.arange(start, start + self.page_size, dtype=np.int64)

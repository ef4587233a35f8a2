"""HiCache storage backends: the contract, the X-Mem backend and its media, a lazy factory.

`XMemHiCacheStorage` implements SGLang's `HiCacheStorage` contract (the L3 storage layer of
SGLang HiCache, `sglang/srt/mem_cache/hicache_storage.py`). It subclasses SGLang's own base
class when `sglang` imports, and `xmemplan.backends.base.LocalHiCacheStorage` (same method
names and signatures) when it does not, so SGLang >= 0.5.12 loads it unchanged with
`--hicache-storage-backend dynamic` (see docs/hicache-backend.md).

Semantics of each primitive, exactly as this package implements them
-------------------------------------------------------------------
Keys are SGLang's page keys (chained SHA-256 hex of a page's token ids; any hashable works,
tests use ints). The backend appends a suffix with model, TP/PP rank and size, host layout,
KV dtype and page size, because SGLang's keys carry none of that (`XMemConfig.suffix`).
A page is stored whole in one fixed-size slot; a key is *live* once its write committed.

- `set(key, value=None, target_location=None, target_sizes=None) -> bool`: store one page
  from a tensor/array `value`, or from a raw host pointer `target_location` of
  `target_sizes` bytes. True when the page is live afterwards, including when it already
  was (a live page is never overwritten: pages are content-addressed). False when the
  store is full and nothing can be evicted, the page is larger than a slot, or the medium
  failed (the slot is then released, nothing half-written becomes visible).
- `batch_set(keys, values=None, target_locations=None, target_sizes=None) -> bool`:
  `set` for each key; True only if every page is live afterwards.
- `get(key, target_location=None, target_sizes=None)`: copy the page into
  `target_location` (tensor/array, or a raw pointer with `target_sizes` bytes) and return
  the target (pointer mode: True). None when the key is absent, or when the copy failed or
  the page's checksum did not match (a corrupt page is dropped and counted, never
  returned). Without a target, a new uint8 numpy array is returned.
- `batch_get(keys, target_locations=None, target_sizes=None) -> list`: `get` per key.
- `exists(key) -> bool`: the key is live. Does not change LRU order.
- `batch_exists(keys, extra_info=None) -> int`: the number of consecutive live keys from the
  start (SGLang's longest-prefix contract); the hits become most recently used.
- `register_mem_pool_host(pool)`: remember SGLang's host KV pool (or
  `xmemplan.backends.hostpool.HostPool`) for the v1 calls; fixes the slot size to one page
  of that pool (`size_per_token * page_size` bytes) if it was not configured.
- `batch_set_v1(keys, host_indices, extra_info=None) -> list[bool]`: zero-copy write of page
  `i` from host-pool slots `host_indices[i*page_size:(i+1)*page_size]` (the pool's
  `get_page_buffer_meta` runs, K then V, stored back to back). One bool per key; True means
  the page is live. All copies are finished when it returns (the pool may reuse the slots).
- `batch_get_v1(keys, host_indices, extra_info=None) -> list[bool]`: zero-copy read into
  those host-pool slots, verifying each page's checksum. Reading stops at the first miss or
  failure (SGLang uses only the leading run of True); later entries are False.
- `clear()`: drop every page (pages held by an in-flight read are freed when it ends).
- `get_stats()`: SGLang's `StorageMetrics` (pages and bandwidth since the last call) when
  SGLang is importable and storage metrics are enabled; else `BackendStats` (cumulative).
- `close()`: release the medium (frees X-Mem allocations). Further calls raise.

Integrity: an xxHash3-64 checksum per page, computed from the source while writing and
verified over the destination after every read. Capacity: when full, the least recently
used page that no in-flight read holds is evicted (`eviction="lru"`), or the write is
refused (`eviction="refuse"`); a live page is never overwritten. Thread safety: one lock
guards the index (key -> slot, LRU order, pins); copies run outside it, so reads and writes
from SGLang's prefetch and backup threads proceed in parallel.

Modes (`XMemConfig.mode`): `real` (the `xmem` SDK of the `xmem-mtier` package, imported only
in this mode), `emulate` (an in-memory arena split into banks, with capacity, bandwidth and
latency shaped to the configured tier; real copies), `dram` (host memory, pinned when torch
sees CUDA; the DRAM baseline), `auto` (`real` when the SDK and libmtier.so are installed,
else `emulate`).
"""

from __future__ import annotations

import importlib
from typing import Any

# Lazy name -> class registry: nothing heavy is imported until a backend is created.
BACKENDS: dict[str, str] = {
    "xmem": "xmemplan.backends.xmem:XMemHiCacheStorage",
}


def backend_class(name: str) -> type:
    """The class registered under `name` (imported on first use)."""
    from xmemplan.errors import UsageError

    try:
        target = BACKENDS[name]
    except KeyError:
        raise UsageError(
            f"unknown storage backend '{name}'", f"known backends: {', '.join(sorted(BACKENDS))}"
        ) from None
    module_name, _, class_name = target.partition(":")
    return getattr(importlib.import_module(module_name), class_name)


def create_backend(name: str = "xmem", config: Any = None, *, node: Any = None,
                   **overrides: Any) -> Any:
    """Build backend `name` from an `XMemConfig` (or its fields as keyword arguments).

    `node`: an emulated device node (`xmemplan.backends.device.EmulatedNode`) that times
    this backend's copies, shared by every backend built with it (simulated GPUs)."""
    from xmemplan.backends.config import XMemConfig

    if config is None:
        config = XMemConfig(**overrides)
    elif overrides:
        config = config.replace(**overrides)
    if node is not None:
        return backend_class(name)(config=config, node=node)
    return backend_class(name)(config=config)


__all__ = ["BACKENDS", "backend_class", "create_backend"]

"""The base class the X-Mem backend subclasses: SGLang's own when importable, else a stand-in.

SGLang's `StorageBackendFactory` (dynamic backends) checks `issubclass(cls, HiCacheStorage)`
and rejects duck-typed classes, so with SGLang installed we must inherit from its class.
Without SGLang (this project's tests, `xmemplan validate`) `LocalHiCacheStorage` provides the
same method names, signatures and defaults (SGLang 0.5.23). Import failures of old SGLang
versions come from deep CUDA imports (ImportError, OSError), hence `except Exception`.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from typing import Any

SGLANG_BASE: Any
try:  # pragma: no cover - depends on whether sglang is installed
    if os.environ.get("XMEMPLAN_NO_SGLANG") == "1":
        raise ImportError("disabled by XMEMPLAN_NO_SGLANG")
    from sglang.srt.mem_cache import hicache_storage as _sglang_storage

    SGLANG_BASE = _sglang_storage.HiCacheStorage
except Exception:  # noqa: BLE001 - any failure means "no usable sglang"
    SGLANG_BASE = None


class LocalHiCacheStorage(ABC):
    """Stand-in for SGLang's `HiCacheStorage` (same interface, no torch needed)."""

    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        self.mem_pool_host = mem_pool_host

    def register_mem_host_pool_v2(self, host_pool: Any, host_pool_name: Any) -> None:
        if not hasattr(self, "registered_pools"):
            self.registered_pools: dict[Any, Any] = {}
        self.registered_pools[host_pool_name] = host_pool

    def on_host_pools_registered(self) -> None:
        return None

    def batch_exists_v2(self, keys: list, pool_transfers: Any = None, extra_info: Any = None):
        raise NotImplementedError()

    def batch_get_v2(self, transfers: list, extra_info: Any = None) -> dict:
        raise NotImplementedError()

    def batch_set_v2(self, transfers: list, extra_info: Any = None) -> dict:
        raise NotImplementedError()

    def batch_get_v1(self, keys: list, host_indices: Any, extra_info: Any = None) -> Any:
        return None

    def batch_set_v1(self, keys: list, host_indices: Any, extra_info: Any = None) -> Any:
        return None

    @abstractmethod
    def get(self, key: Any, target_location: Any = None, target_sizes: Any = None) -> Any: ...

    @abstractmethod
    def batch_get(
        self, keys: list, target_locations: Any = None, target_sizes: Any = None
    ) -> Any: ...

    @abstractmethod
    def set(
        self, key: Any, value: Any = None, target_location: Any = None, target_sizes: Any = None
    ) -> bool: ...

    @abstractmethod
    def batch_set(
        self, keys: list, values: Any = None, target_locations: Any = None,
        target_sizes: Any = None,
    ) -> bool: ...

    @abstractmethod
    def exists(self, key: Any) -> bool: ...

    def batch_exists(self, keys: list, extra_info: Any = None) -> int:
        for i, key in enumerate(keys):
            if not self.exists(key):
                return i
        return len(keys)

    def clear(self) -> None:
        return None

    def get_stats(self) -> Any:
        return None


HiCacheStorageBase: type = SGLANG_BASE if SGLANG_BASE is not None else LocalHiCacheStorage


def storage_metrics_class() -> type | None:
    """SGLang's `StorageMetrics` dataclass (its module moved between versions), or None."""
    for module in ("sglang.srt.observability.metrics_collector", "sglang.srt.metrics.collector"):
        try:
            mod = __import__(module, fromlist=["StorageMetrics"])
            return mod.StorageMetrics
        except Exception:  # noqa: BLE001, S112
            continue
    return None

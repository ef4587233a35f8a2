"""`XMemHiCacheStorage`: SGLang HiCache L3 storage on Netpreme X-Mem (or its emulation).

Load it in SGLang with `--hicache-storage-backend dynamic` and the extra config
`{"backend_name": "xmem", "module_path": "xmemplan.backends.xmem",
"class_name": "XMemHiCacheStorage", "interface_v1": 1, "xmem_mode": "emulate"}`
(docs/hicache-backend.md). The semantics of every method are stated in
`xmemplan.backends` (package docstring).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import xxhash

from xmemplan.backends.base import HiCacheStorageBase, storage_metrics_class
from xmemplan.backends.buffers import byte_view, pointer_view
from xmemplan.backends.config import XMemConfig
from xmemplan.backends.media import (
    ArenaMedium,
    Medium,
    MediumError,
    Shaper,
    XMemMedium,
    import_xmem,
    xmem_installed,
)
from xmemplan.backends.store import EXISTS, Entry, SlotIndex
from xmemplan.errors import NotAvailableError, UsageError, XmemplanError

logger = logging.getLogger("xmemplan.backends.xmem")


class PageCorruptError(XmemplanError):
    """A page read back did not match its checksum (raised only with `strict=True`)."""


@dataclass
class BackendStats:
    """Cumulative counters of one backend (bytes, seconds of wall time in copies)."""

    mode: str
    capacity_pages: int
    live_pages: int
    pages_written: int = 0
    pages_read: int = 0
    bytes_written: int = 0
    bytes_read: int = 0
    write_seconds: float = 0.0
    read_seconds: float = 0.0
    read_misses: int = 0
    corrupt_pages: int = 0
    failed_ops: int = 0
    evictions: int = 0
    refused_writes: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def resolve_mode(mode: str) -> str:
    """`auto` -> `real` when the SDK and libmtier.so are installed, else `emulate`."""
    if mode != "auto":
        return mode
    return "real" if xmem_installed() else "emulate"


def _sizes(parts: Sequence[np.ndarray] | None, entry: Entry) -> list[int]:
    """Copy sizes of one page (its destination parts; the whole entry when unknown)."""
    return [p.shape[0] for p in parts] if parts else [entry.nbytes]


class XMemHiCacheStorage(HiCacheStorageBase):
    """HiCache storage backend: pages in X-Mem banks, an emulated tier, or host DRAM."""

    def __init__(self, storage_config: Any = None, kwargs: Any = None, *,
                 config: XMemConfig | None = None, node: Any = None) -> None:
        # SGLang's factory calls cls(storage_config, {}); the library passes config=.
        self.config = config if config is not None else XMemConfig.from_sglang(storage_config)
        self.storage_config = storage_config
        if getattr(storage_config, "is_mla_model", False) and self.config.tp_size > 1:
            # SGLang writes MLA KV from TP rank 0 only and MIN-reduces hits over ranks; a
            # process-local store gives the other ranks nothing, so L3 hits collapse to 0.
            logger.warning("X-Mem backend: MLA with TP > 1 gets no L3 hits from a per-process "
                           "store; use TP = 1 for MLA models")
        self.mode = resolve_mode(self.config.mode)
        if self.config.mode == "auto" and self.mode == "real":
            try:
                import_xmem()
            except NotAvailableError as exc:
                logger.warning("%s; using the emulated tier", exc.message)
                self.mode = "emulate"
        elif self.mode == "real":
            import_xmem()  # fail now, with the clear message, not at the first write
        self._lock = threading.Lock()  # medium creation and stats
        self._medium: Medium | None = None
        self._index: SlotIndex | None = None
        self._closed = False
        self.mem_pool_host: Any = None
        self._rng = random.Random(self.config.fault_seed)
        c = self.config
        shaped = c.shaping and self.mode != "real"
        # `node`: an emulated device node (xmemplan.backends.device.EmulatedNode) shared with
        # other backends (simulated GPUs); it times this backend's copies instead of the
        # config's shaping figures.
        self._shaper: Any = node.client() if node is not None and shaped else Shaper(
            banks=c.banks,
            read_bytes_per_s=c.read_bytes_per_s if shaped else None,
            write_bytes_per_s=c.write_bytes_per_s if shaped else None,
            bank_bytes_per_s=c.bank_bytes_per_s if shaped else None,
            link_bytes_per_s=c.link_bytes_per_s if shaped else None,
            op_latency_s=c.op_latency_s if shaped else 0.0,
            time_scale=c.time_scale,
        )
        self._stats = BackendStats(mode=self.mode, capacity_pages=0, live_pages=0)
        self._window = {"prefetch_pgs": [], "backup_pgs": [], "prefetch_bandwidth": [],
                        "backup_bandwidth": []}  # type: dict[str, list]
        if c.page_bytes is not None:
            self._ensure_medium(c.page_bytes)

    # -- setup -----------------------------------------------------------------------------
    def _ensure_medium(self, page_bytes: int) -> tuple[Medium, SlotIndex]:
        with self._lock:
            if self._closed:
                raise UsageError("the X-Mem backend is closed")
            if self._medium is None:
                c = self.config
                medium: Medium
                if self.mode == "real":
                    medium = XMemMedium(c.capacity_bytes, page_bytes, c.banks, c.device)
                else:
                    medium = ArenaMedium(self.mode, c.capacity_bytes, page_bytes, c.banks,
                                         pinned=self.mode == "dram" and c.pin_host)
                self._index = SlotIndex(medium.slots, c.eviction)
                self._medium = medium
                self._stats.capacity_pages = medium.slots
            assert self._index is not None
            return self._medium, self._index

    @property
    def slot_bytes(self) -> int | None:
        return None if self._medium is None else self._medium.slot_bytes

    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        self.mem_pool_host = mem_pool_host
        # The key suffix names the pool's real layout, KV dtype and page size (SGLang's
        # storage config only says whether the layout is exactly "page_first").
        if self._index is None or not self._index.live_keys():
            changes: dict[str, Any] = {}
            layout = getattr(mem_pool_host, "layout", None)
            if isinstance(layout, str):
                changes["layout"] = layout
            dtype = getattr(mem_pool_host, "dtype", None)
            if dtype is not None:
                changes["dtype"] = str(dtype).removeprefix("torch.")
            page_size = getattr(mem_pool_host, "page_size", None)
            if isinstance(page_size, int):
                changes["page_size"] = page_size
            if changes:
                self.config = self.config.replace(**changes)
        if self._medium is None:
            per_token = (
                mem_pool_host.get_size_per_token()
                if hasattr(mem_pool_host, "get_size_per_token")
                else getattr(mem_pool_host, "size_per_token", None)
            )
            page_size = int(getattr(mem_pool_host, "page_size", self.config.page_size))
            if per_token:
                self._ensure_medium(int(per_token) * page_size)

    def register_mem_host_pool_v2(self, host_pool: Any, host_pool_name: Any) -> None:
        if not hasattr(self, "registered_pools"):
            self.registered_pools: dict[Any, Any] = {}
        self.registered_pools[host_pool_name] = host_pool

    def on_host_pools_registered(self) -> None:
        return None

    def _key(self, key: Any) -> str:
        return f"{self.config.key_prefix}{key}{self.config.suffix}"

    # -- core page ops ---------------------------------------------------------------------
    def _fault(self) -> None:
        c = self.config
        if c.delay_rate and self._rng.random() < c.delay_rate:
            time.sleep(c.delay_s)
        if c.fault_rate and self._rng.random() < c.fault_rate:
            raise MediumError("injected fault")

    def _hasher(self) -> Any:
        return xxhash.xxh3_64() if self.config.checksum else None

    def _write_pages(self, keys: Sequence[Any], pages: Sequence[Sequence[np.ndarray]]
                     ) -> list[bool]:
        if not keys:
            return []
        size = max(sum(p.shape[0] for p in parts) for parts in pages)
        medium, index = self._ensure_medium(self.config.page_bytes or size)
        t0 = time.perf_counter()
        results: list[bool] = []
        todo: list[tuple[Entry, Sequence[np.ndarray]]] = []
        for key, parts in zip(keys, pages):
            nbytes = sum(p.shape[0] for p in parts)
            if nbytes > medium.slot_bytes:
                logger.error("page of %d B is larger than a slot (%d B)", nbytes, medium.slot_bytes)
                self._stats.failed_ops += 1
                results.append(False)
                continue
            got = index.reserve(self._key(key), nbytes)
            if got is None:
                results.append(False)
            elif got == EXISTS:
                results.append(True)
            else:
                assert isinstance(got, Entry)
                todo.append((got, parts))
                results.append(True)
        shaper = self._shaper
        deadline = t0
        shaper.begin_batch(t0)
        if todo and not shaper.per_page:
            deadline = shaper.reserve("write", [(e.slot % medium.banks, [p.shape[0] for p in ps])
                                                for e, ps in todo], t0)
        written = 0
        failed: set[int] = set()
        for entry, parts in todo:
            page_deadline = 0.0
            if shaper.per_page:
                page_deadline = shaper.reserve(
                    "write", [(entry.slot % medium.banks, [p.shape[0] for p in parts])],
                    time.perf_counter())
            try:
                self._fault()
                hasher = self._hasher()
                medium.write(entry.slot, parts, hasher)
                if not index.commit(entry, hasher.intdigest() if hasher else 0):
                    failed.add(id(entry))
                    continue
                written += entry.nbytes
            except (MediumError, OSError, ValueError) as exc:
                logger.warning("write of %s failed: %s", entry.key, exc)
                index.abort(entry)
                failed.add(id(entry))
            finally:
                shaper.wait_until(page_deadline)
        if todo:
            deadline = max(deadline, time.perf_counter() + shaper.batch_latency())
        shaper.end_batch()
        shaper.wait_until(deadline)
        if failed:
            # Map failures back to the keys they belong to.
            failed_keys = {e.key for e, _ in todo if id(e) in failed}
            results = [ok and self._key(k) not in failed_keys for k, ok in zip(keys, results)]
        elapsed = time.perf_counter() - t0
        with self._lock:
            s = self._stats
            s.pages_written += len(todo) - len(failed)
            s.bytes_written += written
            s.write_seconds += elapsed
            s.failed_ops += len(failed)
            self._window["backup_pgs"].append(len(todo) - len(failed))
            self._window["backup_bandwidth"].append(written / elapsed / 1e9 if elapsed else 0.0)
        return results

    def _read_pages(self, keys: Sequence[Any], pages: Sequence[Sequence[np.ndarray] | None],
                    stop_at_miss: bool) -> list[bool]:
        if not keys:
            return []
        if self._index is None:
            with self._lock:
                self._stats.read_misses += len(keys)
            return [False] * len(keys)
        medium, index = self._ensure_medium(0)
        t0 = time.perf_counter()
        pinned: list[Entry | None] = []
        for key in keys:
            entry = index.pin(self._key(key))
            pinned.append(entry)
            if entry is None and stop_at_miss:
                break
        shaper = self._shaper
        deadline = t0
        shaper.begin_batch(t0)
        live = [(i, e) for i, e in enumerate(pinned) if e is not None]
        if live and not shaper.per_page:
            deadline = shaper.reserve("read", [(e.slot % medium.banks, _sizes(pages[i], e))
                                               for i, e in live], t0)
        results = [False] * len(keys)
        nread = misses = corrupt = failed = 0
        stopped = False
        try:
            for i, entry in enumerate(pinned):
                if entry is None:
                    misses += 1
                    stopped = stop_at_miss
                    continue
                if stopped:
                    continue
                parts = pages[i]
                assert parts is not None
                if sum(p.shape[0] for p in parts) != entry.nbytes:
                    logger.error("destination of %s holds %d B, the page has %d B", entry.key,
                                 sum(p.shape[0] for p in parts), entry.nbytes)
                    failed += 1
                    stopped = stop_at_miss
                    continue
                page_deadline = 0.0
                if shaper.per_page:
                    page_deadline = shaper.reserve(
                        "read", [(entry.slot % medium.banks, [p.shape[0] for p in parts])],
                        time.perf_counter())
                try:
                    self._fault()
                    hasher = self._hasher()
                    medium.read(entry.slot, parts, hasher)
                except (MediumError, OSError, ValueError) as exc:
                    logger.warning("read of %s failed: %s", entry.key, exc)
                    failed += 1
                    stopped = stop_at_miss
                    continue
                finally:
                    shaper.wait_until(page_deadline)
                if hasher is not None and hasher.intdigest() != entry.checksum:
                    index.drop(entry)
                    corrupt += 1
                    logger.error("page %s failed its checksum: dropped", entry.key)
                    if self.config.strict:
                        raise PageCorruptError(f"page {entry.key} failed its checksum")
                    stopped = stop_at_miss
                    continue
                results[i] = True
                nread += entry.nbytes
        finally:
            for entry in pinned:
                if entry is not None:
                    index.unpin(entry)
        misses += len(keys) - len(pinned)
        if live:
            deadline = max(deadline, time.perf_counter() + shaper.batch_latency())
        shaper.end_batch()
        shaper.wait_until(deadline)
        elapsed = time.perf_counter() - t0
        with self._lock:
            s = self._stats
            ok = sum(results)
            s.pages_read += ok
            s.bytes_read += nread
            s.read_seconds += elapsed
            s.read_misses += misses
            s.corrupt_pages += corrupt
            s.failed_ops += failed
            self._window["prefetch_pgs"].append(ok)
            self._window["prefetch_bandwidth"].append(nread / elapsed / 1e9 if elapsed else 0.0)
        return results

    # -- SGLang contract: generic path ------------------------------------------------------
    def set(self, key: Any, value: Any = None, target_location: Any = None,
            target_sizes: Any = None) -> bool:
        return self.batch_set([key], [value] if value is not None else None,
                              [target_location] if target_location is not None else None,
                              [target_sizes] if target_sizes is not None else None)

    def batch_set(self, keys: list, values: Any = None, target_locations: Any = None,
                  target_sizes: Any = None) -> bool:
        return all(self._batch_set_list(keys, values, target_locations, target_sizes))

    def _batch_set_list(self, keys: list, values: Any, target_locations: Any,
                        target_sizes: Any) -> list[bool]:
        pages: list[list[np.ndarray]] = []
        for i in range(len(keys)):
            if values is not None:
                pages.append([byte_view(values[i])])
            elif target_locations is not None:
                size = target_sizes[i] if target_sizes is not None else None
                pages.append([byte_view(target_locations[i], size)])
            else:
                raise UsageError("set needs a value or a target location")
        return self._write_pages(keys, pages)

    def get(self, key: Any, target_location: Any = None, target_sizes: Any = None) -> Any:
        out = self.batch_get([key], [target_location] if target_location is not None else None,
                             [target_sizes] if target_sizes is not None else None)
        return out[0]

    def batch_get(self, keys: list, target_locations: Any = None,
                  target_sizes: Any = None) -> list:
        targets: list[Any] = []
        pages: list[Sequence[np.ndarray] | None] = []
        for i, key in enumerate(keys):
            if target_locations is not None and target_locations[i] is not None:
                size = target_sizes[i] if target_sizes is not None else None
                target = target_locations[i]
                pages.append([byte_view(target, size, writable=True)])
            else:
                nbytes = self._live_nbytes(key)
                target = np.empty(nbytes or 0, dtype=np.uint8)
                pages.append([target])
            targets.append(target)
        ok = self._read_pages(keys, pages, stop_at_miss=False)
        out: list[Any] = []
        for good, target in zip(ok, targets):
            if not good:
                out.append(None)
            elif isinstance(target, int | np.integer):
                out.append(True)  # pointer mode
            else:
                out.append(target)
        return out

    def _live_nbytes(self, key: Any) -> int | None:
        if self._index is None:
            return None
        entry = self._index.pin(self._key(key))
        if entry is None:
            return None
        self._index.unpin(entry)
        return entry.nbytes

    def exists(self, key: Any) -> bool:
        return self._index is not None and self._index.exists(self._key(key))

    def batch_exists(self, keys: list, extra_info: Any = None) -> int:
        if self._index is None:
            return 0
        return self._index.leading_hits([self._key(k) for k in keys])

    # -- SGLang contract: zero-copy v1 ------------------------------------------------------
    def _host_pages(self, keys: list, host_indices: Any) -> list[list[np.ndarray]]:
        pool = self.mem_pool_host
        if pool is None:
            raise UsageError("batch_*_v1 needs a host pool: call register_mem_pool_host first")
        if not keys:
            return []
        page_size = int(getattr(pool, "page_size", 1))
        if len(host_indices) != len(keys) * page_size:
            raise UsageError(
                f"{len(host_indices)} host indices for {len(keys)} pages of {page_size} tokens",
                "pass page_size host indices per key",
            )
        ptrs, sizes = pool.get_page_buffer_meta(host_indices)
        runs = len(ptrs) // len(keys)
        if runs * len(keys) != len(ptrs):
            raise UsageError(
                f"host pool returned {len(ptrs)} buffers for {len(keys)} pages",
                "pass page_size host indices per key",
            )
        pages = [
            [pointer_view(ptrs[j], sizes[j]) for j in range(i * runs, (i + 1) * runs)]
            for i in range(len(keys))
        ]
        if getattr(pool, "layout", "") == "layer_first" and runs == 2 * getattr(
            pool, "layer_num", -1
        ):
            # SGLang lists a layer_first MHA page as K0, V0, K1, V1, ...; store it as
            # K0..K(L-1), V0..V(L-1), the order of `get_data_page(i).flatten()`, so that pages
            # written by the v1 and the generic paths are the same bytes under one key.
            pages = [parts[0::2] + parts[1::2] for parts in pages]
        return pages

    def batch_set_v1(self, keys: list, host_indices: Any, extra_info: Any = None) -> list[bool]:
        return self._write_pages(keys, self._host_pages(keys, host_indices))

    def batch_get_v1(self, keys: list, host_indices: Any, extra_info: Any = None) -> list[bool]:
        pages: list[Sequence[np.ndarray] | None] = list(self._host_pages(keys, host_indices))
        return self._read_pages(keys, pages, stop_at_miss=True)

    # -- admin -----------------------------------------------------------------------------
    def clear(self) -> None:
        if self._index is not None:
            self._index.clear()

    def stats(self) -> BackendStats:
        with self._lock:
            s = BackendStats(**self._stats.as_dict())
        if self._index is not None:
            c = self._index.counts()
            s.live_pages = c["live"]
            s.evictions = self._index.evictions
            s.refused_writes = self._index.refused
        return s

    def get_stats(self) -> Any:
        if self.config.enable_storage_metrics:
            cls = storage_metrics_class()
            if cls is not None:
                with self._lock:
                    window, self._window = self._window, {k: [] for k in self._window}
                return cls(**window)
        return self.stats()

    def close(self) -> None:
        with self._lock:
            if self._medium is not None:
                self._medium.close()
            self._medium = None
            self._closed = True

    # -- test and harness hooks ------------------------------------------------------------
    def check_consistency(self) -> None:
        """Raise AssertionError if slots leaked or overlap (used by the tests)."""
        if self._index is None:
            return
        c = self._index.counts()
        if c["pending"] == 0 and c["pinned"] == 0 and c["live"] + c["free"] != c["slots"]:
            raise AssertionError(f"slot accounting broken: {c}")
        slots = [self._index._live[k].slot for k in self._index.live_keys()]
        if len(set(slots)) != len(slots):
            raise AssertionError("two live pages share a slot")
        free = set(self._index._free)
        if free & set(slots):
            raise AssertionError("a live page's slot is on the free list")
        if len(free) != len(self._index._free):
            raise AssertionError("a slot is on the free list twice")

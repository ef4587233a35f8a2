"""Where the pages live: an in-memory arena (emulate, dram) or X-Mem banks (real).

A medium is `banks` arrays of equal fixed-size slots; slot `s` lives in bank `s % banks`
(interleaved, so consecutive pages spread over banks as an allocator striping across X-Mem
banks would). It only copies bytes; the index, checksums and locking live in
`xmemplan.backends.store` and `xmemplan.backends.xmem`.

Copies are chunked (256 KiB) and each chunk is hashed right after it is copied, while it is
still in cache: with 6 MiB pages that keeps checksumming from costing a second pass over
memory (`benchmarks/bench_backend.py` measures it).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from xmemplan.errors import NotAvailableError, UsageError, XmemplanError

CHUNK_BYTES = 256 << 10

XMEM_UNAVAILABLE = "X-Mem is not available on this machine"


class MediumError(XmemplanError):
    """A copy to or from the medium failed (the page op fails; the store stays consistent)."""


class Hasher(Protocol):
    def update(self, data: Any) -> None: ...


class Medium(Protocol):
    kind: str
    banks: int
    slot_bytes: int
    slots: int

    def write(self, slot: int, parts: Sequence[np.ndarray], hasher: Hasher | None) -> None: ...

    def read(self, slot: int, parts: Sequence[np.ndarray], hasher: Hasher | None) -> None: ...

    def close(self) -> None: ...


def _copy_hash(dst: np.ndarray, src: np.ndarray, hash_view: np.ndarray, hasher: Hasher | None
               ) -> None:
    n = src.shape[0]
    if hasher is None:
        np.copyto(dst, src)
        return
    for off in range(0, n, CHUNK_BYTES):
        end = min(n, off + CHUNK_BYTES)
        np.copyto(dst[off:end], src[off:end])
        hasher.update(hash_view[off:end])


class ArenaMedium:
    """Host-memory arena split into banks (modes `emulate` and `dram`)."""

    def __init__(self, kind: str, capacity_bytes: int, slot_bytes: int, banks: int,
                 pinned: bool = False) -> None:
        self.kind = kind
        self.banks = banks
        self.slot_bytes = slot_bytes
        per_bank = capacity_bytes // banks // slot_bytes
        if per_bank < 1:
            # A configuration the caller chose (validate: --max-bytes over --readers), not
            # a fault of ours: a usage error (exit 2), not an internal one.
            raise UsageError(
                f"capacity {capacity_bytes} B holds no {slot_bytes} B page in each of "
                f"{banks} banks",
                "raise the capacity or lower the bank count (validate: raise --max-bytes "
                "or lower --readers)",
            )
        self.slots = per_bank * banks
        self.pinned = False
        self.arena = [self._alloc(per_bank * slot_bytes, pinned) for _ in range(banks)]

    def _alloc(self, nbytes: int, pinned: bool) -> np.ndarray:
        if pinned:
            try:
                import torch

                if torch.cuda.is_available():
                    buf = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
                    self.pinned = True
                    self._keep = getattr(self, "_keep", []) + [buf]
                    return buf.numpy()
            except Exception:  # noqa: BLE001 - pinned memory is an optimisation only
                pass
        return np.empty(nbytes, dtype=np.uint8)

    def slot_view(self, slot: int, nbytes: int | None = None) -> np.ndarray:
        bank, local = slot % self.banks, slot // self.banks
        start = local * self.slot_bytes
        return self.arena[bank][start : start + (self.slot_bytes if nbytes is None else nbytes)]

    def write(self, slot: int, parts: Sequence[np.ndarray], hasher: Hasher | None) -> None:
        off = 0
        total = sum(p.shape[0] for p in parts)
        dst_all = self.slot_view(slot, total)
        for src in parts:
            n = src.shape[0]
            _copy_hash(dst_all[off : off + n], src, src, hasher)
            off += n

    def read(self, slot: int, parts: Sequence[np.ndarray], hasher: Hasher | None) -> None:
        off = 0
        total = sum(p.shape[0] for p in parts)
        src_all = self.slot_view(slot, total)
        for dst in parts:
            n = dst.shape[0]
            _copy_hash(dst, src_all[off : off + n], dst, hasher)
            off += n

    def close(self) -> None:
        self.arena = []
        self._keep = []


def xmem_installed() -> bool:
    """True when the `xmem` package and libmtier.so are present (no import, no side effect)."""
    import importlib.util

    if importlib.util.find_spec("xmem") is None:
        return False
    lib = os.environ.get("MTIER_LIB_PATH", "/usr/local/lib/libmtier.so")
    return Path(lib).is_file()


def import_xmem() -> Any:
    """Import the X-Mem SDK, turning every way it fails into one clear NotAvailableError.

    `import xmem` raises OSError (not ImportError) without libmtier.so, ModuleNotFoundError
    without cuda-python, and MTier errors when the service is down: it starts the service
    client at import time.
    """
    try:
        import xmem
    except (OSError, ImportError) as exc:
        raise NotAvailableError(
            f"{XMEM_UNAVAILABLE} ({type(exc).__name__}: {exc})",
            "install the xmem-mtier package and libmtier.so (MTIER_LIB_PATH) on an X-Mem "
            "host, or run without --real to use the emulated tier",
        ) from exc
    except Exception as exc:  # MTierServiceUnavailableError and friends
        raise NotAvailableError(
            f"{XMEM_UNAVAILABLE}: the MTier service did not start ({type(exc).__name__}: {exc})",
            "check 'mtier_service status' on the host, or run without --real",
        ) from exc
    try:
        available = bool(xmem.is_available())
    except Exception as exc:  # noqa: BLE001
        raise NotAvailableError(f"{XMEM_UNAVAILABLE}: status query failed ({exc})") from exc
    if not available:
        raise NotAvailableError(
            f"{XMEM_UNAVAILABLE}: the SDK imported but reports the tier as not ready",
            "check the MTier service ('mtier_service status'), or run without --real",
        )
    return xmem


def _cuda_ok(err: Any) -> bool:
    """cuda-python returns `cudaError_t` enums; cudaSuccess is 0."""
    return int(getattr(err, "value", err)) == 0


class XMemMedium:
    """Slots in X-Mem banks through the `xmem` SDK (mode `real`).

    One allocation per bank, made once (`xmem.allocate`; the SDK's malloc is not thread-safe
    and must not run on SGLang's I/O threads); the handles are kept for the medium's life
    (dropping an `XMemTensorMTier` frees its memory). Copies use raw pointers
    (`remote_addr`) with `cudaMemcpy`, never `prefetch(reuse=False)`, which frees the source.
    """

    def __init__(self, capacity_bytes: int, slot_bytes: int, banks: int, device: int) -> None:
        self.kind = "real"
        self.slot_bytes = slot_bytes
        self.device = device
        self._xmem = import_xmem()
        try:
            from cuda.bindings import runtime as cudart
        except Exception as exc:  # noqa: BLE001
            raise NotAvailableError(f"{XMEM_UNAVAILABLE}: cuda-python is missing ({exc})") from exc
        self._cudart = cudart
        try:
            hw_banks = int(self._xmem.mbank_count())
        except Exception as exc:  # noqa: BLE001
            raise NotAvailableError(f"{XMEM_UNAVAILABLE}: cannot count banks ({exc})") from exc
        self.banks = max(1, min(banks, hw_banks))
        per_bank = capacity_bytes // self.banks // slot_bytes
        if per_bank < 1:
            raise XmemplanError(f"capacity {capacity_bytes} B holds no {slot_bytes} B page")
        self.slots = per_bank * self.banks
        try:
            import torch

            dtype: Any = torch.uint8
        except Exception:  # noqa: BLE001 - the fake SDK in tests needs no torch
            dtype = "uint8"
        self._handles: list[Any] = []
        self._base: list[int] = []
        for bank in range(self.banks):
            need = per_bank * slot_bytes
            try:
                free = int(self._xmem.memory_available(bank))
            except Exception:  # noqa: BLE001 - optional helper
                free = need
            if free < need:
                self.close()
                raise NotAvailableError(
                    f"X-Mem bank {bank} has {free:,} bytes free, {need:,} are needed",
                    "lower xmem_capacity, or free memory with 'mtier_service reset'",
                )
            try:
                handle = self._xmem.allocate(
                    (per_bank, slot_bytes), dtype, bank_id=bank, device=f"cuda:{device}"
                )
            except Exception as exc:  # noqa: BLE001 - MTierOutOfMemoryError, MTierMallocError...
                self.close()
                raise NotAvailableError(
                    f"X-Mem allocation of {need:,} bytes in bank {bank} failed "
                    f"({type(exc).__name__}: {exc})",
                    "lower xmem_capacity, or check the MTier service",
                ) from exc
            self._handles.append(handle)
            self._base.append(int(handle.remote_addr))

    def _addr(self, slot: int) -> int:
        return self._base[slot % self.banks] + (slot // self.banks) * self.slot_bytes

    def _memcpy(self, dst: int, src: int, n: int, kind: Any) -> None:
        cudart = self._cudart
        (err,) = cudart.cudaSetDevice(self.device)[:1]
        if not _cuda_ok(err):
            raise MediumError(f"cudaSetDevice({self.device}) failed: {err}")
        (err,) = cudart.cudaMemcpy(dst, src, n, kind)[:1]
        if not _cuda_ok(err):
            raise MediumError(f"cudaMemcpy of {n} bytes failed: {err}")

    def write(self, slot: int, parts: Sequence[np.ndarray], hasher: Hasher | None) -> None:
        kind = self._cudart.cudaMemcpyKind.cudaMemcpyHostToDevice
        addr = self._addr(slot)
        for src in parts:
            if hasher is not None:
                hasher.update(src)
            self._memcpy(addr, src.ctypes.data, src.shape[0], kind)
            addr += src.shape[0]

    def read(self, slot: int, parts: Sequence[np.ndarray], hasher: Hasher | None) -> None:
        kind = self._cudart.cudaMemcpyKind.cudaMemcpyDeviceToHost
        addr = self._addr(slot)
        for dst in parts:
            self._memcpy(dst.ctypes.data, addr, dst.shape[0], kind)
            if hasher is not None:
                hasher.update(dst)
            addr += dst.shape[0]

    def close(self) -> None:
        self._handles = []  # the SDK frees owned memory when a handle is dropped
        self._base = []


class Shaper:
    """Time model of the emulated tier: when would a batch of copies finish on it?

    Each resource (a bank, the node's read or write side, this client's link) serves bytes
    at its rate, first come first served: a reservation starts when the resource is next
    free (or now) and holds it for bytes / rate. A batch finishes when its last reservation
    ends, plus one fixed operation latency. All times are multiplied by `time_scale`.
    """

    def __init__(self, *, banks: int, read_bytes_per_s: float | None,
                 write_bytes_per_s: float | None, bank_bytes_per_s: float | None,
                 link_bytes_per_s: float | None, op_latency_s: float, time_scale: float) -> None:
        self.read_bps = read_bytes_per_s
        self.write_bps = write_bytes_per_s
        self.bank_bps = bank_bytes_per_s
        self.link_bps = link_bytes_per_s
        self.latency = op_latency_s
        self.scale = time_scale
        self._lock = threading.Lock()
        self._bank_free = [0.0] * banks
        self._node_free = {"read": 0.0, "write": 0.0}
        self._link_free = 0.0

    per_page = False  # one reservation per batch (see backends.device for per page)

    @property
    def active(self) -> bool:
        return any(x is not None for x in (self.read_bps, self.write_bps, self.bank_bps,
                                           self.link_bps)) or self.latency > 0

    def batch_latency(self) -> float:
        return 0.0  # included in the batch's deadline

    def begin_batch(self, now: float) -> None:
        return None

    def end_batch(self) -> None:
        return None

    def reserve(self, direction: str, pages: Sequence[tuple[int, Sequence[int]]],
                now: float) -> float:
        """Reserve the tier for one batch of pages [(bank, copy sizes)]; the deadline
        (perf_counter seconds)."""
        bytes_by_bank: dict[int, int] = {}
        for bank, parts in pages:
            bytes_by_bank[bank] = bytes_by_bank.get(bank, 0) + sum(parts)
        total = sum(bytes_by_bank.values())
        node_bps = self.read_bps if direction == "read" else self.write_bps
        end = now
        with self._lock:
            if self.bank_bps is not None:
                for bank, n in bytes_by_bank.items():
                    start = max(now, self._bank_free[bank])
                    self._bank_free[bank] = start + self.scale * n / self.bank_bps
                    end = max(end, self._bank_free[bank])
            if node_bps is not None:
                start = max(now, self._node_free[direction])
                self._node_free[direction] = start + self.scale * total / node_bps
                end = max(end, self._node_free[direction])
            if self.link_bps is not None:
                start = max(now, self._link_free)
                self._link_free = start + self.scale * total / self.link_bps
                end = max(end, self._link_free)
        return end + self.scale * self.latency

    @staticmethod
    def wait_until(deadline: float) -> None:
        remaining = deadline - time.perf_counter()
        if remaining > 0:
            time.sleep(remaining)

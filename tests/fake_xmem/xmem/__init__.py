"""Fake `xmem` SDK for tests (see ../README.md). Remote memory is host RAM."""

import ctypes
import os

_mode = os.environ.get("FAKE_XMEM_IMPORT", "")
if _mode == "oserror":
    raise OSError(
        "MTier shared library not found at /usr/local/lib/libmtier.so. Please ensure "
        "libmtier.so is installed or set the MTIER_LIB_PATH environment variable."
    )


class MTierError(Exception):
    pass


class MTierServiceUnavailableError(MTierError):
    pass


class MTierOutOfMemoryError(MTierError):
    pass


if _mode == "service":
    raise MTierServiceUnavailableError("mTierInit: service unavailable (code 4)")

ALLOCATIONS: list[tuple[int, int]] = []  # (bank id, bytes) of each allocation, in order
_used: dict[int, int] = {}  # bytes allocated per bank id


def _banks():
    return int(os.environ.get("FAKE_XMEM_BANKS", "4"))


def _bank_bytes():
    return int(os.environ.get("FAKE_XMEM_BANK_BYTES", str(64 << 20)))


def is_available():
    return os.environ.get("FAKE_XMEM_NOT_READY") != "1"


def mbank_count():
    return _banks()


def memory_available(bank):
    return _bank_bytes() - _used.get(bank, 0)


class XMemTensorMTier:
    def __init__(self, dims, dtype, bank_id, device):
        n = 1
        for d in dims:
            n *= int(d)
        self.shape, self.dtype, self.device, self.size = tuple(dims), dtype, device, n
        self.bank_id = bank_id
        self._buf = (ctypes.c_uint8 * n)()
        self.remote_addr = ctypes.addressof(self._buf)

    def __del__(self):
        _used[self.bank_id] = _used.get(self.bank_id, 0) - self.size

    def prefetch(self, dst_tensor=None, device=None, reuse=False, non_blocking=False,
                 stream=None):
        raise AssertionError("xmemplan must copy with raw pointers, not prefetch()")


def allocate(dims, dtype, bank_id=0, device=None):
    if not 0 <= bank_id < _banks():
        raise MTierError(f"invalid bank {bank_id}")
    n = 1
    for d in dims:
        n *= int(d)
    if n > memory_available(bank_id):
        raise MTierOutOfMemoryError(f"bank {bank_id}: {n} bytes requested")
    _used[bank_id] = _used.get(bank_id, 0) + n
    ALLOCATIONS.append((bank_id, n))
    return XMemTensorMTier(dims, dtype, bank_id, device)

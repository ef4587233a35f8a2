"""Fake `cuda.bindings.runtime`: cudaSetDevice and cudaMemcpy over host memory (tests only)."""

import ctypes
import enum


class cudaError_t(enum.IntEnum):  # noqa: N801 - mirrors cuda-python
    cudaSuccess = 0
    cudaErrorInvalidValue = 1


class cudaMemcpyKind(enum.IntEnum):  # noqa: N801
    cudaMemcpyHostToHost = 0
    cudaMemcpyHostToDevice = 1
    cudaMemcpyDeviceToHost = 2
    cudaMemcpyDeviceToDevice = 3
    cudaMemcpyDefault = 4


FAIL_COPIES = 0
COPIES: list[tuple[int, int]] = []  # (kind, bytes) of each cudaMemcpy


def cudaSetDevice(device):  # noqa: N802
    return (cudaError_t.cudaSuccess,)


def cudaMemcpy(dst, src, count, kind):  # noqa: N802
    global FAIL_COPIES
    if FAIL_COPIES > 0:
        FAIL_COPIES -= 1
        return (cudaError_t.cudaErrorInvalidValue,)
    COPIES.append((int(kind), int(count)))
    ctypes.memmove(int(dst), int(src), int(count))
    return (cudaError_t.cudaSuccess,)

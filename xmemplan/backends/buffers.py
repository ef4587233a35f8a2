"""Byte views of the things SGLang hands a storage backend, without importing torch.

A page may arrive as a torch tensor (CPU), a numpy array, a bytes-like object, or a raw
host pointer plus a byte count (pointer mode, and the runs of `get_page_buffer_meta`). All
become a flat writable `uint8` numpy view of the same memory: no copy.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from xmemplan.errors import UsageError


def pointer_view(ptr: int, nbytes: int) -> np.ndarray:
    """A uint8 view of `nbytes` of host memory at address `ptr` (the caller keeps it alive)."""
    if nbytes == 0:
        return np.empty(0, dtype=np.uint8)
    return np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(int(ptr)))


def is_torch_tensor(obj: Any) -> bool:
    return type(obj).__module__.startswith("torch") and hasattr(obj, "data_ptr")


def byte_view(obj: Any, nbytes: int | None = None, *, writable: bool = False) -> np.ndarray:
    """Flat uint8 view of `obj` (see the module docstring). `nbytes` is required for pointers.

    A non-contiguous source is copied to a contiguous one (only allowed when not writable:
    a destination must be written in place).
    """
    if isinstance(obj, int | np.integer) and not isinstance(obj, bool):
        if nbytes is None:
            raise UsageError("a raw pointer needs its size in bytes (target_sizes)")
        return pointer_view(int(obj), int(nbytes))
    if isinstance(obj, np.ndarray):
        if not obj.flags.c_contiguous:
            if writable:
                raise UsageError("a destination array must be C-contiguous")
            obj = np.ascontiguousarray(obj)
        view = obj.reshape(-1).view(np.uint8)
    elif is_torch_tensor(obj):
        if getattr(obj.device, "type", "cpu") != "cpu":
            raise UsageError(
                "this backend copies to and from host memory; got a tensor on "
                f"{obj.device}", "pass a CPU (pinned) tensor, as SGLang's host pool does",
            )
        if not obj.is_contiguous():
            if writable:
                raise UsageError("a destination tensor must be contiguous")
            obj = obj.contiguous()
        view = pointer_view(obj.data_ptr(), obj.numel() * obj.element_size())
        # Keep the tensor alive as long as the view.
        view = _Anchored(view, obj)
    elif isinstance(obj, bytes | bytearray | memoryview):
        view = np.frombuffer(obj, dtype=np.uint8)
        if writable and not view.flags.writeable:
            raise UsageError("a destination must be writable (bytes is read-only)")
    else:
        raise UsageError(f"cannot store a {type(obj).__name__}: pass an array, tensor or bytes")
    if nbytes is not None and view.shape[0] != nbytes:
        if view.shape[0] < nbytes:
            raise UsageError(f"buffer holds {view.shape[0]} bytes, {nbytes} were asked for")
        view = view[:nbytes]
    return view


class _Anchored(np.ndarray):
    """A numpy view that holds a reference to the object that owns its memory."""

    _owner: Any = None

    def __new__(cls, view: np.ndarray, owner: Any) -> _Anchored:
        obj = view.view(cls)
        obj._owner = owner
        return obj

    def __array_finalize__(self, obj: Any) -> None:
        self._owner = getattr(obj, "_owner", None)

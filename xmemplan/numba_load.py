"""Load numba's cached kernels without first loading its compiler's registries.

numba's `Cache.load_overload` (numba/core/caching.py) calls `target_context.refresh()`
before it reads a cached kernel: that imports and installs every typing and lowering
registry (numba.cpython.*, numba.np.*, the typed containers, jitclass, third-party entry
points), about 0.12 s of CPU here on the first dispatch of a process, a sixth of
`size --gpus 1`. Reading machine code back needs none of it: the registries tell the
compiler how to type and lower Python, and a cached kernel is already lowered. What the
loaded code does need is numba's runtime (NRT: its allocator and reference counts, the
symbols its code links against), initialised by `rtsys.initialize`.

`install()` replaces `load_overload` with one that initialises the runtime and loads, and
falls back to numba's own path (refresh, then load) when the cache has no entry or the load
fails. A kernel that is compiled, not loaded, is untouched: numba's compiler refreshes the
registries itself (`CompilerBase.__init__`), so the registries are loaded exactly when
something is compiled.

Installed only on numba versions this was checked on (`TESTED`); elsewhere numba keeps
its own path, as it does with XMEMPLAN_NUMBA_FAST_LOAD=0 in the environment (to rule this
out when a kernel misbehaves; benchmarks/bench_size.py measures with and without it).
Tests: tests/test_numba_load.py.
"""

from __future__ import annotations

import os
from typing import Any

# numba versions whose caching.Cache.load_overload was read here and found to be
# refresh() followed by _load_overload (0.68.1, the version this project runs)
TESTED = ((0, 68), (0, 68))

ENV = "XMEMPLAN_NUMBA_FAST_LOAD"  # "0": numba's own load path
_installed = False


def _version(v: str) -> tuple[int, int]:
    parts = v.split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return (0, 0)


def install() -> bool:
    """Install the loader (idempotent); False where numba's version is not one we checked
    or its internals are not where they were."""
    global _installed
    if _installed:
        return True
    if os.environ.get(ENV, "1") == "0":
        return False
    import numba
    from numba.core import caching

    lo, hi = TESTED
    if not lo <= _version(numba.__version__) <= hi:
        return False
    try:
        from numba.core.runtime import rtsys
    except ImportError:
        return False
    cache_cls = caching.Cache
    original = getattr(cache_cls, "load_overload", None)
    if (original is None or not hasattr(cache_cls, "_load_overload")
            or not hasattr(cache_cls, "_guard_against_spurious_io_errors")):
        return False

    def load_overload(self: Any, sig: Any, target_context: Any) -> Any:
        try:
            rtsys.initialize(target_context)
            with self._guard_against_spurious_io_errors():
                data = self._load_overload(sig, target_context)
        except Exception:  # anything unexpected: numba's own path decides
            data = None
        if data is None:
            return original(self, sig, target_context)
        return data

    load_overload.__doc__ = original.__doc__
    cache_cls.load_overload = load_overload  # type: ignore[method-assign]
    _installed = True
    return True


def installed() -> bool:
    return _installed

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

Loading a kernel also rebuilds the Environment of every function linked into it
(numba/core/environment.py `_rebuild_env`), and that imports the module each was written
in: numba's own `numba.np.arraymath` for the array functions the kernels call, which
imports `numba.np.arrayobj` and the string and character-sequence typing with it, 0.16-0.21 s
of CPU here (a tenth of `size --gpus 1`). A nopython function reads its Environment's
constants (`consts`, restored from the cache) and never its module's globals: those serve
object mode and the interpreter fallback, which these kernels do not have. `install()` also
replaces `_rebuild_env` with one that gives a function of a numba module not yet imported a
globals dict holding only its `__name__`; every other module (ours, and numba's once
imported) is imported and used as numba does.

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
    _lazy_environments()
    _installed = True
    return True


def _lazy_environments() -> None:
    """Replace numba's `_rebuild_env` (module doc): unpickling a cached kernel looks the
    function up by name on numba.core.environment, so the module attribute is what it
    calls."""
    import importlib
    import sys

    from numba.core import environment as env_mod

    original = getattr(env_mod, "_rebuild_env", None)
    env_cls = getattr(env_mod, "Environment", None)
    lookup = getattr(env_mod, "lookup_environment", None)
    if original is None or env_cls is None or lookup is None:
        return

    def _rebuild_env(modname: str, consts: Any, env_name: str) -> Any:
        env = lookup(env_name)
        if env is not None:
            return env
        mod = sys.modules.get(modname)
        if mod is None and modname.startswith("numba."):
            scope: dict[str, Any] = {"__name__": modname}  # nopython: globals unread
        else:
            scope = (mod if mod is not None else importlib.import_module(modname)).__dict__
        env = env_cls(scope)
        env.consts[:] = consts
        env.env_name = env_name
        env_cls._memo[env_name] = env
        return env

    _rebuild_env.__doc__ = original.__doc__
    env_mod._rebuild_env = _rebuild_env


def installed() -> bool:
    return _installed

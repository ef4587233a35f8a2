"""The one-line note a run prints when numba starts compiling the simulation kernels.

A fresh install has no compiled kernels: its first `size` (or `plan`) compiles them, 2-3
minutes of CPU on a 2-core machine (docs/performance.md, "First run"); later runs load
them from numba's on-disk cache in about a second. A cache can also be there and hold
nothing this run can use (numba keys a kernel by its source, its argument types and the
CPU: a cache made on another machine, or after an edit, compiles again), and the run is
then as slow as a first one. So the note is not decided from the cache's files: it is
printed when numba reports that it compiles one of our kernels (its "numba:compile"
event, sent only when the cache has no entry), once per process. Meanwhile the command's
spinner counts the seconds.

The note goes to stderr, and only to a terminal (not with -q): a script's or a test's
captured output is the same on a compiling run as on any other.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

NOTE = ("Compiling the simulation kernels for this machine (numba's cache holds none this "
        "run can use: a first run, or the sources, numba or the CPU changed). Once: 2-3 "
        "minutes on 2 cores; later runs load them from the cache in about a second.")

_state: dict[str, Any] = {"listener": None, "said": False}
_lock = threading.Lock()


def first_run_notice() -> None:
    """On a terminal: say so when one of our kernels starts compiling (once per process;
    the first compile, in whatever thread it runs)."""
    if not sys.stderr.isatty():
        return
    with _lock:
        if _state["listener"] is not None:
            return
        from numba.core import event

        class _Compiling(event.Listener):
            def on_start(self, ev: Any) -> None:
                if ours(ev.data):
                    _say()

            def on_end(self, ev: Any) -> None:
                return

        _state["listener"] = _Compiling()
        event.register("numba:compile", _state["listener"])


def ours(data: Any) -> bool:
    """Whether a numba:compile event is for a function of this package."""
    d = data.get("dispatcher") if isinstance(data, dict) else None
    module = getattr(getattr(d, "py_func", None), "__module__", None) or ""
    return module == "xmemplan" or module.startswith("xmemplan.")


def _say() -> None:
    with _lock:
        if _state["said"]:
            return
        _state["said"] = True
    from xmemplan.cli.views import render

    render.info(NOTE)

"""The one-line note a first run prints before numba compiles the engine's kernels.

A fresh install has no compiled kernels: its first `size` (or `plan`) compiles them, 1-2
minutes of CPU on a 2-core machine (docs/performance.md, "First run"), and prints nothing
else meanwhile. Later runs load them from numba's on-disk cache in well under a second.
The note goes to stderr, and only to a terminal: a script's or a test's captured output
is the same on the first run as on any other.
"""

from __future__ import annotations

import sys


def first_run_notice() -> None:
    if not sys.stderr.isatty():
        return
    from xmemplan.sizing.engine import kernels_cached

    if not kernels_cached():
        print("First run after install: compiling the simulation kernels for this machine\n"
              "(1-2 minutes, once; later runs load them from the cache).", file=sys.stderr,
              flush=True)

"""Independent simulations on the machine's cores, in threads.

The engine's kernels (`sizing/engine/loop.run_kernel`, `sizing/synthetic._lru_kernel`)
are compiled with `nogil=True`: while one thread is inside a kernel the others run Python.
A `size --gpus N` sweep's points are independent (each load and option its own
simulation), so they run `workers()` at a time; the Python around each kernel call
(schedules, re-plans, percentiles) still takes turns on the interpreter lock, which is
why two threads give less than twice the speed (docs/performance.md, round 10).

Results come back in the order of the inputs and do not depend on the thread count: every
simulation is a function of its own inputs (its seed included), never of which ran first.
XMEMPLAN_THREADS=1 runs them one after another, in this thread.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

ENV = "XMEMPLAN_THREADS"


def workers() -> int:
    """Threads to use: XMEMPLAN_THREADS when set (at least 1), else the cores this process
    may run on."""
    raw = os.environ.get(ENV, "").strip()
    if raw:
        try:
            return max(1, int(raw))
        except ValueError:
            return 1
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not on Linux
        return max(1, os.cpu_count() or 1)


def map_ordered(fn: Callable[[T], R], items: Sequence[T], limit: int | None = None
                ) -> list[R]:
    """[fn(x) for x in items], up to `limit` (default `workers()`) at a time; the first
    exception in input order is raised, after the others finished."""
    n = min(len(items), workers() if limit is None else max(1, limit))
    if n <= 1:
        return [fn(x) for x in items]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=n, thread_name_prefix="xmemplan") as pool:
        futures = [pool.submit(fn, x) for x in items]
        return [f.result() for f in futures]

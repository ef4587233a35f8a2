"""Shared helpers for the benchmarks: timing with medians, machine description."""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Callable


def median_time(fn: Callable[[], object], repeat: int = 5, warmup: int = 1) -> tuple[float, list[float]]:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times


def machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"

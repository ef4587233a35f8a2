"""Shared helpers for the benchmarks: timing with medians, machine description."""

from __future__ import annotations

import argparse
import os
import platform
import signal
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


def add_async_flag(ap: argparse.ArgumentParser) -> None:
    """--async-schedule on|off: the loaded checks' switch for the engines' async
    scheduling (docs/size.md, The simulator)."""
    ap.add_argument("--async-schedule", choices=("on", "off"), default=None,
                    help="the engines' async scheduling (docs/size.md, The simulator); "
                         "default: as shipped")


def apply_async_flag(a: argparse.Namespace) -> None:
    """Set the simulator's default from --async-schedule, where given."""
    if a.async_schedule:
        from xmemplan.sizing import simmodel

        simmodel.ASYNC_BY_DEFAULT = a.async_schedule == "on"


def pipe_friendly() -> None:
    """End quietly when the reader closes the pipe (`script | head`), as a shell tool does,
    instead of a BrokenPipeError traceback."""
    if hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)


"""Shared helpers for the benchmarks: timing with medians, machine description."""

from __future__ import annotations

import argparse
import os
import platform
import signal
import statistics
import time
from collections.abc import Callable


def positive_int(text: str) -> int:
    """argparse type for counts (--seeds, --runs, --repeats): a whole number of at least
    1, else a usage error naming the value (0 replays would leave nothing to take a
    median of)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{n} is below 1")
    return n


def median_time(fn: Callable[[], object], repeat: int = 5, warmup: int = 1) -> tuple[float, list[float]]:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times


def loop_ns() -> float:
    """The machine's speed on plain Python: ns per iteration of a fixed 1M-iteration
    `s += i` loop, the median of 5. These VMs differ from day to day (the same commit's
    `size` took 1.4 s one day and 2.9 s the next, docs/performance.md round 11), so every
    benchmark prints it: compare figures across days by it, and side by side in one run."""
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        s = 0
        for i in range(1_000_000):
            s += i
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def machine() -> str:
    return (f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
            f"a Python loop {loop_ns():.0f} ns an iteration")


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


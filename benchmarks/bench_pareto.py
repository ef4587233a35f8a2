"""Benchmark of `xmemplan size --gpus 1` (docs/performance.md, section "size: the load
sweep"): the X-Mem post's setup, six loads x two options (issue 24: target < 5 s).

1. `sweep()` in-process: every simulation and re-planned run of the twelve points.
2. The whole command as a subprocess, start-up included.

Each after one warm-up run (numba's kernel cache, the OS file cache); median, min, max.

    .venv/bin/python benchmarks/bench_pareto.py [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

from _util import positive_int

ARGS = ["size", "--gpus", "1", "--tier-capacity", "64GB"]


def bench_inprocess(runs: int) -> tuple[list[float], list[float], int]:
    from xmemplan.cli.pareto import build
    from xmemplan.defaults import SEED_GPU
    from xmemplan.sizing.pareto import sweep
    from xmemplan.sizing.synthetic import SyntheticWorkload

    req, said = build(gpus=1, workload=SyntheticWorkload(), rates=None, concurrency=None,
                      model=None, gpu=SEED_GPU, engine="sglang", host_tier="host-dram-pcie5",
                      xmem_tier="xmem", tier_capacity="64GB", catalog=[], requests=4000,
                      seed=0)
    sweep(req, said)  # warm-up
    out, cpu, sims = [], [], 0
    for _ in range(runs):
        t0, c0 = time.perf_counter(), time.process_time()
        res = sweep(req, said)
        out.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        sims = res.simulations
    return out, cpu, sims


def bench_command(runs: int) -> tuple[list[float], list[float]]:
    """(wall seconds, CPU seconds) of the whole command: on a shared machine the wall time
    counts the other processes' load too."""
    import resource

    cmd = [sys.executable, "-m", "xmemplan", *ARGS]
    subprocess.run(cmd, check=True, capture_output=True)  # warm-up
    wall, cpu = [], []
    for _ in range(runs):
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        wall.append(time.perf_counter() - t0)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
    return wall, cpu


def _line(name: str, v: list[float]) -> str:
    return (f"{name}: median {statistics.median(v):.2f} s (min {min(v):.2f}, max {max(v):.2f}, "
            f"{len(v)} runs)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=positive_int, default=5)
    a = ap.parse_args()
    t, c, sims = bench_inprocess(a.runs)
    print(_line(f"sweep(), 6 loads x 2 options, {sims} engine runs, wall", t))
    print(_line(f"sweep(), 6 loads x 2 options, {sims} engine runs, CPU", c))
    wall, cpu = bench_command(a.runs)
    print(_line("xmemplan " + " ".join(ARGS) + ", wall", wall))
    print(_line("xmemplan " + " ".join(ARGS) + ", CPU", cpu))
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()

"""Benchmark of `xmemplan size --gpus 1` (docs/performance.md, section "size: the load
sweep"): the X-Mem post's setup, six loads x two options (issue 24: target < 5 s).

1. `sweep()` in-process: every simulation and re-planned run of the twelve points.
2. The whole command as a subprocess, start-up included.

Each after one warm-up run (numba's kernel cache, the OS file cache); median, min, max.

    .venv/bin/python benchmarks/bench_pareto.py [--runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

ARGS = ["size", "--gpus", "1", "--tier-capacity", "64GB"]


def bench_inprocess(runs: int) -> tuple[list[float], int]:
    from xmemplan.cli.pareto import build
    from xmemplan.defaults import SEED_GPU
    from xmemplan.sizing.pareto import sweep
    from xmemplan.sizing.synthetic import SyntheticWorkload

    req, said = build(gpus=1, workload=SyntheticWorkload(), rates=None, concurrency=None,
                      model=None, gpu=SEED_GPU, engine="sglang", host_tier="host-dram-pcie5",
                      xmem_tier="xmem", tier_capacity="64GB", catalog=[], requests=2000,
                      seed=0)
    sweep(req, said)  # warm-up
    out, sims = [], 0
    for _ in range(runs):
        t0 = time.perf_counter()
        res = sweep(req, said)
        out.append(time.perf_counter() - t0)
        sims = res.simulations
    return out, sims


def bench_command(runs: int) -> list[float]:
    cmd = [sys.executable, "-m", "xmemplan", *ARGS]
    subprocess.run(cmd, check=True, capture_output=True)  # warm-up
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        out.append(time.perf_counter() - t0)
    return out


def _line(name: str, v: list[float]) -> str:
    return (f"{name}: median {statistics.median(v):.2f} s (min {min(v):.2f}, max {max(v):.2f}, "
            f"{len(v)} runs)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    t, sims = bench_inprocess(a.runs)
    print(_line(f"sweep(), 6 loads x 2 options, {sims} simulations", t))
    print(_line("xmemplan " + " ".join(ARGS), bench_command(a.runs)))


if __name__ == "__main__":
    main()

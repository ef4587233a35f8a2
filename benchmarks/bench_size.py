"""Benchmarks for `xmemplan size` (docs/performance.md, section "size").

1. A sweep of 10,000 configurations (10 prompt lengths x 10 hit rates x 10 bandwidths x
   10 concurrencies) through the vectorized model: target < 1 s (and 32^4 = 1,048,576 for
   scale).
2. The whole bare `xmemplan size --ttft-slo 500ms` command (the seed scenario simulated as
   traffic: about 40 simulations of 4,000 requests), start-up included, as a subprocess:
   target < 2 s (issue 12). The same with `--format json`, which adds the p99-against-load
   curve (21 more simulations). 3. `xmemplan size --gpus 1` (the load sweep): target
   < 1 s. Each command's wall time and its CPU time (user + system, the child's rusage).

Each is run several times after one warm-up run (the OS file cache, numba's kernel cache,
Python's bytecode cache); the median (and min/max) are printed. The commands run with
Python's defaults: PYTHONDONTWRITEBYTECODE (set on the machines this project is built on)
is dropped from their environment, so that the warm-up writes xmemplan's `.pyc` files as
any first run does on a default Python, and `pip install .` does at install. Under it each
run compiles every xmemplan module again (about 75 ms here).

    .venv/bin/python benchmarks/bench_size.py [--runs 5]

`--trees A,B` compares source trees instead (each a checkout of xmemplan, run as
`python -m xmemplan` with PYTHONPATH=TREE, this interpreter): one warm-up run of each
command per tree, then `--runs` rounds in which every tree runs every command once, the
trees alternating (so each pair shares the machine's minutes); per command and tree the
median wall and CPU (user + sys) time, and each tree's ratio to the first; the load
average before and after. A tree given as `PATH@VAR=VALUE` runs with that variable set
(`.@XMEMPLAN_NUMBA_FAST_LOAD=0,.` measures one change alone: docs/performance.md round 8);
`PATH@PYTHONPATH=DIR` puts DIR before the tree, e.g. another release of a dependency
installed with `pip install --no-deps --target DIR` (round 9: typer 0.29 against 0.28).
`--check` also compares each command's stdout across the trees byte for byte (and fails
when they differ).

Without `--trees` the commands run this checkout (`python -m xmemplan`, PYTHONPATH = the
checkout), not whatever `xmemplan` is on PATH: an editable install of another worktree
would otherwise be what is measured.

    .venv/bin/python benchmarks/bench_size.py --trees /work/wt/base,. --runs 9 --check
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the in-process sweep imports this checkout's xmemplan too
sys.path.insert(0, str(ROOT / "benchmarks"))
from _util import machine, positive_int  # noqa: E402


def bench_sweep(runs: int, per_axis: int = 10) -> list[float]:
    from xmemplan.catalog import load_catalog
    from xmemplan.sizing.sweep import sweep

    cat = load_catalog()
    m, g, t = cat.model("qwen3-30b-a3b-fp8"), cat.gpu("h100-sxm"), cat.tier("xmem")
    grid = dict(
        prompt_tokens=np.linspace(4096, 131_072, per_axis),
        hit_rates=np.linspace(0.9, 1.0, per_axis),
        bandwidths_bytes_per_s=np.geomspace(25e9, 1.8e12, per_axis),
        concurrencies=np.arange(1, per_axis + 1),
    )
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        out = sweep(m, g, t, **grid)  # type: ignore[arg-type]
        times.append(time.perf_counter() - t0)
    assert out["ttft_s"].size == per_axis**4
    return times


def bench_cli(runs: int, *extra: str, args: tuple[str, ...] = ("--ttft-slo", "500ms"),
              cpu: list[float] | None = None) -> list[float]:
    """Wall seconds per run; with `cpu`, also each run's user + system CPU seconds (on a
    shared, loaded machine wall time measures the neighbours: compare CPU time)."""
    # this checkout's xmemplan, whatever `xmemplan` on PATH (an editable install elsewhere)
    cmd = [sys.executable, "-m", "xmemplan", "size", *args, *extra]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(ROOT)
    subprocess.run(cmd, check=True, capture_output=True, env=env,
                   cwd=tempfile.gettempdir())  # warm the caches
    times = []
    for _ in range(runs):
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True, env=env, cwd=tempfile.gettempdir())
        times.append(time.perf_counter() - t0)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        if cpu is not None:
            cpu.append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
    return times


def _run_tree(tree: str, args: tuple[str, ...]) -> tuple[float, float, bytes]:
    """(wall s, CPU s, stdout) of `python -m xmemplan size ARGS` on source tree `tree`
    (`PATH` or `PATH@VAR=VALUE`: the tree with one more environment variable)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    path, _, var = tree.partition("@")
    env["PYTHONPATH"] = str(Path(path).resolve())
    if var:
        k, _, v = var.partition("=")
        # PYTHONPATH=DIR puts DIR before the tree (another release of a dependency)
        env[k] = v + os.pathsep + env["PYTHONPATH"] if k == "PYTHONPATH" else v
    cmd = [sys.executable, "-m", "xmemplan", "size", *args]
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run(cmd, check=True, capture_output=True, env=env,
                         cwd=tempfile.gettempdir()).stdout
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime, out


TREE_COMMANDS = (
    ("size --ttft-slo 500ms (target < 2 s)", ("--ttft-slo", "500ms")),
    ("size --ttft-slo 500ms --format json", ("--ttft-slo", "500ms", "--format", "json")),
    ("size --ttft-slo 500ms --engine vllm", ("--ttft-slo", "500ms", "--engine", "vllm")),
    ("size --gpus 1 (target < 1 s)", ("--gpus", "1")),
    ("size --gpus 1 --format json", ("--gpus", "1", "--format", "json")),
)


def compare_trees(trees: list[str], runs: int, check: bool) -> int:
    """Alternating runs of each tree (see the module doc); returns 1 when --check found
    outputs that differ."""
    print(f"machine: {machine()}")
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    outs: dict[tuple[str, str], bytes] = {}
    for name, args in TREE_COMMANDS:
        for t in trees:
            outs[(name, t)] = _run_tree(t, args)[2]  # warm-up (and the output to check)
    wall: dict[tuple[str, str], list[float]] = {k: [] for k in outs}
    cpu: dict[tuple[str, str], list[float]] = {k: [] for k in outs}
    for r in range(runs):
        order = trees if r % 2 == 0 else trees[::-1]
        for name, args in TREE_COMMANDS:
            for t in order:
                w, c, _ = _run_tree(t, args)
                wall[(name, t)].append(w)
                cpu[(name, t)].append(c)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"medians of {runs} alternating runs, ms (ratio to {trees[0]})")
    print("| command | tree | wall | CPU (user+sys) | wall ratio | CPU ratio |")
    print("|---|---|---:|---:|---:|---:|")
    bad = 0
    for name, _ in TREE_COMMANDS:
        w0 = statistics.median(wall[(name, trees[0])])
        c0 = statistics.median(cpu[(name, trees[0])])
        for t in trees:
            w = statistics.median(wall[(name, t)])
            c = statistics.median(cpu[(name, t)])
            print(f"| {name} | {t} | {w * 1e3:,.0f} ({min(wall[(name, t)]) * 1e3:,.0f}-"
                  f"{max(wall[(name, t)]) * 1e3:,.0f}) | {c * 1e3:,.0f} | {w / w0:.2f} | "
                  f"{c / c0:.2f} |")
        if check and len({outs[(name, t)] for t in trees}) > 1:
            print(f"OUTPUT DIFFERS between trees: {name}")
            bad = 1
    if check and not bad:
        print("outputs byte-identical across trees for every command")
    return bad


def _show(name: str, times: list[float]) -> None:
    print(f"{name}: median {statistics.median(times) * 1e3:.1f} ms "
          f"(min {min(times) * 1e3:.1f}, max {max(times) * 1e3:.1f}, {len(times)} runs)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=positive_int, default=5)
    ap.add_argument("--trees", help="comma-separated source trees to compare, each PATH or "
                    "PATH@VAR=VALUE (module doc)")
    ap.add_argument("--check", action="store_true", help="with --trees: outputs must agree")
    args = ap.parse_args()
    if not args.trees:
        print(f"machine: {machine()}")
    if args.trees:
        sys.exit(compare_trees([t for t in args.trees.split(",") if t], args.runs, args.check))
    _show("sweep of 10,000 configurations", bench_sweep(args.runs))
    _show("sweep of 1,048,576 configurations", bench_sweep(args.runs, per_axis=32))
    for name, extra, cmd in (
            ("xmemplan size --ttft-slo 500ms (subprocess, start-up included; target < 2 s)",
             (), ("--ttft-slo", "500ms")),
            ("xmemplan size --ttft-slo 500ms --format json (adds the load curve)",
             ("--format", "json"), ("--ttft-slo", "500ms")),
            ("xmemplan size --gpus 1 (the load sweep; target < 1 s)", (), ("--gpus", "1"))):
        cpu: list[float] = []
        _show(name + ", wall", bench_cli(args.runs, *extra, args=cmd, cpu=cpu))
        _show(name + ", CPU user+sys", cpu)


if __name__ == "__main__":
    main()

"""Where a first run's numba compile goes (docs/performance.md, "Round 9: first-run compile").

Copies each source tree given (its tracked and untracked files, no `__pycache__`, so
numba's cache is empty) to a temporary directory and runs one command there as a fresh
process, `python -m xmemplan ARGS` (default: bare `size --ttft-slo 500ms`), with a
listener on numba's compile events (`numba.core.event`, `numba:compile`): per function
its compilations and its exclusive CPU seconds (a nested compilation's own time is its
callee's, not its caller's). Prints the process's CPU (user + sys, its rusage) and wall
time, and the functions over `--min` seconds; with several trees, they alternate over
`--runs` rounds (each pair shares the machine's minutes) and a table compares them.

    .venv/bin/python benchmarks/bench_compile.py --trees /work/wt/base,. [--runs 2]

PYTHONDONTWRITEBYTECODE is dropped from the child's environment (a user's first run
writes its `.pyc` files too).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _util import positive_int

CHILD = r"""
import atexit, json, os, sys, time, runpy
from numba.core import event as ev

stack = []
per = {}

class L(ev.Listener):
    def on_start(self, event):
        stack.append([time.process_time(), 0.0])

    def on_end(self, event):
        t0, child = stack.pop()
        dt = time.process_time() - t0
        if stack:
            stack[-1][1] += dt
        d = event.data["dispatcher"]
        name = f"{d.py_func.__module__}.{d.py_func.__qualname__}"
        e = per.setdefault(name, [0, 0.0])
        e[0] += 1
        e[1] += dt - child

ev.register("numba:compile", L())

def dump():
    with open(os.environ["XMEMPLAN_COMPILE_OUT"], "w") as f:
        json.dump(per, f)

atexit.register(dump)
sys.argv = ["xmemplan"] + json.loads(os.environ["XMEMPLAN_COMPILE_ARGS"])
runpy.run_module("xmemplan", run_name="__main__")
"""


def fresh_copy(tree: Path, dest: Path) -> Path:
    """The tree's tracked and untracked (not ignored) files under dest."""
    out = subprocess.run(["git", "-C", str(tree), "ls-files", "-co", "--exclude-standard"],
                         check=True, capture_output=True, text=True).stdout.split("\n")
    for rel in out:
        if not rel or "__pycache__" in rel:
            continue
        src = tree / rel
        if not src.is_file():
            continue
        dst = dest / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)
    return dest


def run_once(tree: Path, args: list[str]) -> dict:
    with tempfile.TemporaryDirectory(prefix="xmemplan-compile-") as tmp:
        root = fresh_copy(tree, Path(tmp) / "tree")
        outf = Path(tmp) / "per.json"
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env.update(PYTHONPATH=str(root), XMEMPLAN_COMPILE_OUT=str(outf),
                   XMEMPLAN_COMPILE_ARGS=json.dumps(args))
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        load0 = os.getloadavg()[0]
        t0 = time.perf_counter()
        p = subprocess.run([sys.executable, "-c", CHILD], cwd=root, env=env,
                           capture_output=True, text=True)
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if p.returncode != 0:
            sys.stderr.write(p.stderr[-4000:])
            raise SystemExit(f"{tree}: exit {p.returncode}")
        per = json.loads(outf.read_text())
    return dict(tree=str(tree), wall=wall, user=after.ru_utime - before.ru_utime,
                sys=after.ru_stime - before.ru_stime, per=per, stdout=p.stdout,
                load=(load0, os.getloadavg()[0]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trees", default=".", help="comma-separated source trees")
    ap.add_argument("--runs", type=positive_int, default=1, help="rounds (the trees alternate)")
    ap.add_argument("--min", type=float, default=0.5, help="functions over this, s")
    ap.add_argument("--json", help="write every run's figures here")
    ap.add_argument("args", nargs="*", default=["size", "--ttft-slo", "500ms"])
    a = ap.parse_args()
    trees = [Path(t).resolve() for t in a.trees.split(",")]
    runs: dict[str, list[dict]] = {str(t): [] for t in trees}
    for k in range(a.runs):
        for t in trees:
            r = run_once(t, a.args)
            runs[str(t)].append(r)
            comp = sum(v[1] for v in r["per"].values())
            print(f"round {k + 1} {t}: {r['user'] + r['sys']:.1f} s CPU ({r['user']:.1f} u "
                  f"{r['sys']:.1f} s), {r['wall']:.1f} s wall, compile events {comp:.1f} s "
                  f"in {sum(v[0] for v in r['per'].values())} compilations of "
                  f"{len(r['per'])} functions, load {r['load'][0]:.1f} -> {r['load'][1]:.1f}",
                  flush=True)
    outs = {r["stdout"] for rs in runs.values() for r in rs}
    print(f"stdout identical across runs: {len(outs) == 1}")
    names: set[str] = set()
    for rs in runs.values():
        for r in rs:
            names |= {n for n, v in r["per"].items() if v[1] >= a.min}

    def med(t: str, n: str) -> float:
        return statistics.median(r["per"].get(n, [0, 0.0])[1] for r in runs[t])

    def cnt(t: str, n: str) -> int:
        return max(r["per"].get(n, [0, 0.0])[0] for r in runs[t])

    first = str(trees[0])
    print("\nexclusive compile CPU, s (median over rounds), x compilations")
    print(f"{'function':60s}" + "".join(f"{Path(t).name:>16s}" for t in runs))
    for n in sorted(names, key=lambda n: -med(first, n)):
        print(f"{n[-60:]:60s}" + "".join(f"{med(t, n):11.1f} x{cnt(t, n):<3d}" for t in runs))
    print(f"{'process CPU (user + sys)':60s}" + "".join(
        f"{statistics.median(r['user'] + r['sys'] for r in runs[t]):16.1f}" for t in runs))
    print(f"{'wall':60s}" + "".join(
        f"{statistics.median(r['wall'] for r in runs[t]):16.1f}" for t in runs))
    if a.json:
        Path(a.json).write_text(json.dumps(runs, indent=1))


if __name__ == "__main__":
    main()

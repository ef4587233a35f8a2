"""The engine simulator's kernel alone, warm, across source trees (docs/performance.md,
rounds 8 and 9).

Captures the arguments of every `run_kernel` call of one `xmemplan size` command (default
bare `size --ttft-slo 500ms`; run with the first tree), then replays them through each
tree's kernel in a process of its own (its numba cache warm: run the command in each tree
once first), `--passes` times a process, the minimum pass kept; the trees alternate over
`--rounds` processes each. Checks that every tree returns the same outputs.

    .venv/bin/python benchmarks/bench_kernel.py --trees /work/wt/base,. [--rounds 4]
        [-- size --ttft-slo 500ms --engine vllm]
"""

from __future__ import annotations

import argparse
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CAPTURE = r"""
import pickle, sys, runpy
import numpy as np
import xmemplan.sizing.engine as eng
calls = []
real = eng.run_kernel
def spy(*a):
    calls.append(tuple(x.copy() if isinstance(x, np.ndarray) else x for x in a))
    return real(*a)
eng.run_kernel = spy
sys.argv = ["xmemplan"] + sys.argv[2:]
try:
    runpy.run_module("xmemplan", run_name="__main__")
except SystemExit:
    pass
with open(OUT, "wb") as f:
    pickle.dump(calls, f)
"""

REPLAY = r"""
import hashlib, pickle, sys, time
import numpy as np
from xmemplan.sizing.engine.loop import run_kernel
calls = pickle.load(open(sys.argv[1], "rb"))
passes = int(sys.argv[2])
def one():
    outs = []
    t0 = time.process_time()
    for a in calls:
        outs.append(run_kernel(*(x.copy() if isinstance(x, np.ndarray) else x for x in a)))
    return time.process_time() - t0, outs
one()  # load
best = None
for _ in range(passes):
    t, outs = one()
    best = t if best is None or t < best else best
h = hashlib.sha256()
for o in outs:
    for x in o:
        h.update(np.asarray(x).tobytes())
print(best, h.hexdigest())
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trees", required=True)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--passes", type=int, default=5)
    ap.add_argument("args", nargs="*", default=["size", "--ttft-slo", "500ms"])
    a = ap.parse_args()
    trees = [Path(t).resolve() for t in a.trees.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        cap = Path(tmp) / "calls.pkl"
        env = dict(os.environ, PYTHONPATH=str(trees[0]))  # the first tree's kernels
        subprocess.run([sys.executable, "-c", CAPTURE.replace("OUT", repr(str(cap))), "-",
                        *a.args], check=True, env=env, stdout=subprocess.DEVNULL)
        n = len(pickle.loads(cap.read_bytes()))
        times: dict[Path, list[float]] = {t: [] for t in trees}
        digests = set()
        for _ in range(a.rounds):
            for t in trees:
                out = subprocess.run([sys.executable, "-c", REPLAY, str(cap), str(a.passes)],
                                     check=True, capture_output=True, text=True,
                                     env=dict(os.environ, PYTHONPATH=str(t))).stdout.split()
                times[t].append(float(out[0]))
                digests.add(out[1])
        print(f"{' '.join(a.args)}: {n} run_kernel calls, min of {a.passes} passes a "
              f"process, {a.rounds} processes a tree (alternating); load "
              f"{os.getloadavg()[0]:.1f}")
        med0 = statistics.median(times[trees[0]])
        for t in trees:
            ms = [f"{x * 1e3:.0f}" for x in times[t]]
            med = statistics.median(times[t])
            print(f"  {t}: {', '.join(ms)} ms; median {med * 1e3:.0f} ms "
                  f"({med / med0:.3f} of the first)")
        print(f"  outputs identical: {len(digests) == 1}")
        if len(digests) != 1:
            raise SystemExit(1)


if __name__ == "__main__":
    main()

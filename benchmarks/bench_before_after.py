"""The whole `xmemplan hitrate` command at two commits, interleaved in one run.

    python benchmarks/bench_before_after.py --ref 8302803 [--copies 8] [--repeat 5]

Checks out REF into a temporary git worktree, then alternates the two versions on the same
inputs (the shared Claude Code block traces copied `--copies` times, as bench_e2e.py builds
them, and the Mooncake conversation trace), warm numba cache for both. Asserts that both
report the same figures and prints each one's median and the ratio. Used to show that a
restructure changed neither the numbers nor the speed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _util import machine
from bench_e2e import DEFAULT_SOURCE, build

ROOT = Path(__file__).resolve().parent.parent
MOONCAKE = ROOT.parent / "shared" / "traces" / "mooncake-fast25" / "conversation_trace.jsonl"
FIGURES = ("requests", "prompt_tokens", "hit_tokens", "token_hit_ratio", "rounds_ge1_mean")


def run(code_root: Path, target: Path, cache: Path) -> tuple[float, dict]:
    env = dict(os.environ, PYTHONPATH=str(code_root), NUMBA_CACHE_DIR=str(cache))
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "xmemplan", "-q", "hitrate", str(target),
                          "--format", "json"], capture_output=True, text=True, env=env,
                         check=True, cwd=code_root)
    return time.perf_counter() - t0, json.loads(out.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--ref", required=True)
    ap.add_argument("--copies", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    print(f"machine: {machine()}")
    tmp = Path(tempfile.mkdtemp(prefix="xmemplan-ba-"))
    before = tmp / "before"
    try:
        subprocess.run(["git", "worktree", "add", "--detach", str(before), args.ref],
                       cwd=ROOT, check=True, capture_output=True)
        data = tmp / "traces"
        data.mkdir()
        size = build(DEFAULT_SOURCE, data, args.copies)
        targets = [(f"claude-code-weka x{args.copies} ({size / 1e6:.0f} MB)", data)]
        if MOONCAKE.exists():
            targets.append(("mooncake conversation trace", MOONCAKE))
        for label, target in targets:
            times: dict[str, list[float]] = {"before": [], "after": []}
            figs = {}
            for name, code in (("before", before), ("after", ROOT)):  # warm the caches
                _, figs[name] = run(code, target, tmp / f"numba-{name}")
            for key in FIGURES:
                assert figs["before"][key] == figs["after"][key], (label, key, figs)
            for _ in range(args.repeat):
                for name, code in (("before", before), ("after", ROOT)):
                    t, _ = run(code, target, tmp / f"numba-{name}")
                    times[name].append(t)
            mb, ma = (sorted(times[n])[len(times[n]) // 2] for n in ("before", "after"))
            print(f"\n{label}: figures identical ({', '.join(FIGURES)})")
            print(f"  before {args.ref}: median {mb:.2f} s  runs {[round(t, 2) for t in times['before']]}")
            print(f"  after  (tree) : median {ma:.2f} s  runs {[round(t, 2) for t in times['after']]}")
            print(f"  after / before: {ma / mb:.2f}")
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(before)], cwd=ROOT,
                       capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
